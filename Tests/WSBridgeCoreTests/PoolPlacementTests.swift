import Testing
import WSBridgeCore

/// A pool's placement (docs/limits.md, "A pool of connections"): first connection with room, the
/// next opened when all are full, a clear refusal at the limits, an emptied connection retired
/// (never the first) and its slot used again.
@Suite struct PoolPlacementTests {
    @Test func keysFillTheFirstConnectionThenTheNextOpens() {
        var pool = PoolPlacement(capacity: 3, maxConnections: 3)
        #expect(pool.place("a", weight: 2) == .on(slot: 0))
        #expect(pool.place("b", weight: 1) == .on(slot: 0))
        // Full: the next connection opens for it.
        #expect(pool.place("c", weight: 1) == .open(slot: 1))
        pool.opened(1)
        #expect(pool.slots == [0, 1])
        // A key already placed stays where it is, weighed once.
        #expect(pool.place("c", weight: 1) == .on(slot: 1))
        #expect(pool.load(on: 1) == 1)
        // A lighter key still fits on an earlier connection with room.
        #expect(pool.place("d", weight: 2) == .on(slot: 1))
    }

    @Test func theProtocolLayersSubscriptionsCountInEachConnectionsLoad() {
        var pool = PoolPlacement(capacity: 4, maxConnections: 2)
        // Slot 0's layer holds 3 subscriptions: a key of 2 does not fit beside them.
        #expect(pool.place("a", weight: 2, extra: { $0 == 0 ? 3 : 0 }) == .open(slot: 1))
        pool.opened(1)
        #expect(pool.load(on: 0, extra: 3) == 3)
        #expect(pool.slot(forNew: 1, what: "this subscription", extra: { $0 == 0 ? 3 : 0 }) == .on(slot: 0))
    }

    @Test func aFullPoolAndATooHeavyKeySayWhatToChange() {
        var pool = PoolPlacement(capacity: 2, maxConnections: 1)
        guard case .refused(let heavy) = pool.place("big", weight: 3) else {
            Issue.record("a key heavier than a connection holds was placed")
            return
        }
        #expect(heavy.contains("weighs 3") && heavy.contains("upstream.subscriptions_per_connection = 2") && heavy.contains("split it"))
        #expect(pool.keys["big"] == nil)
        #expect(pool.place("a", weight: 2) == .on(slot: 0))
        guard case .refused(let full) = pool.place("b", weight: 1) else {
            Issue.record("a pool at upstream.connections opened one more")
            return
        }
        #expect(full.contains("upstream.connections = 1") && full.contains("raise either setting"), "\(full)")
        #expect(pool.keys["b"] == nil && pool.slots == [0])
    }

    @Test func anEmptiedConnectionRetiresButNeverTheFirstAndItsSlotIsUsedAgain() {
        var pool = PoolPlacement(capacity: 1, maxConnections: 3)
        #expect(pool.place("a", weight: 1) == .on(slot: 0))
        #expect(pool.place("b", weight: 1) == .open(slot: 1))
        pool.opened(1)
        #expect(pool.place("c", weight: 1) == .open(slot: 2))
        pool.opened(2)
        // The first connection stays when its key leaves.
        #expect(pool.release("a") == nil)
        #expect(pool.slots == [0, 1, 2])
        // Slot 1's key leaves while its layer still holds a subscription: it stays; once that
        // goes too, it may retire.
        #expect(!pool.retirable(1, extra: 0))
        #expect(pool.release("b", extra: { $0 == 1 ? 1 : 0 }) == nil, "a connection whose layer still holds a subscription stays")
        #expect(!pool.retirable(1, extra: 1))
        #expect(pool.retirable(1, extra: 0))
        pool.retired(1)
        #expect(pool.slots == [0, 2])
        // Slot 2's only key leaves: release names it to retire.
        #expect(pool.release("c") == 2)
        pool.retired(2)
        // A release of an unknown key changes nothing.
        #expect(pool.release("zz") == nil)
        // The first connection has room again; then the freed slot 1 is the next to open.
        #expect(pool.slots == [0])
        #expect(pool.place("d", weight: 1) == .on(slot: 0))
        #expect(pool.place("e", weight: 1) == .open(slot: 1))
    }

    @Test func aReloadsLimitsApplyToNewKeysOnly() {
        var pool = PoolPlacement(capacity: 2, maxConnections: 1)
        #expect(pool.place("a", weight: 2) == .on(slot: 0))
        pool.update(capacity: 1, maxConnections: 2)
        #expect(pool.keys["a"]?.slot == 0)
        #expect(pool.place("b", weight: 1) == .open(slot: 1))
        pool.update(capacity: nil, maxConnections: 2)
        #expect(pool.place("c", weight: 100) == .on(slot: 0))
    }
}
