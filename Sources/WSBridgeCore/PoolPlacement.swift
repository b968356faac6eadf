/// Where a pool's subscriptions go (`upstream.subscriptions_per_connection`,
/// `upstream.connections`, docs/limits.md), decided: each connection (a slot, from 0) holds keys
/// of some weight, up to `capacity` with what its protocol layer holds (`extra`, passed in: the
/// layer counts its own subscriptions); a new key goes on the first connection with room, and
/// when every one is full the next opens, up to `maxConnections`. A connection other than the
/// first whose keys and subscriptions all left retires. Pure: the pool does what it returns
/// (open a connection, send on one, close one).
public struct PoolPlacement: Sendable {
    /// What to do with a new key.
    public enum Placement: Sendable, Equatable {
        /// On this open connection.
        case on(slot: Int)
        /// On a new connection at `slot`: open it.
        case open(slot: Int)
        /// Nowhere: why, in the operator's words (what to change).
        case refused(String)
    }

    public private(set) var capacity: Int
    public private(set) var maxConnections: Int
    /// The open connections' slots, in order.
    public private(set) var slots: [Int] = [0]
    /// Each key's slot and weight.
    public private(set) var keys: [String: (slot: Int, weight: Int)] = [:]
    /// The keys' weight on each slot.
    private var weights: [Int: Int] = [:]

    /// `capacity`: nil for no limit.
    public init(capacity: Int?, maxConnections: Int) {
        self.capacity = capacity ?? Int.max
        self.maxConnections = max(1, maxConnections)
    }

    /// The limits changed (a reload): what is placed stays; new keys meet the new limits.
    public mutating func update(capacity: Int?, maxConnections: Int) {
        self.capacity = capacity ?? Int.max
        self.maxConnections = max(1, maxConnections)
    }

    /// The weight on `slot`: its keys', and what its protocol layer holds (`extra`).
    public func load(on slot: Int, extra: Int = 0) -> Int {
        (self.weights[slot] ?? 0) + extra
    }

    /// Where a new subscription of `weight` goes (`what` names it in a refusal; `extra`: each
    /// slot's protocol load). Placing nothing: `place` does, for a key.
    public func slot(forNew weight: Int, what: String, extra: (Int) -> Int = { _ in 0 }) -> Placement {
        guard weight <= self.capacity else {
            return .refused(
                "\(what) weighs \(weight) subscriptions (upstream.subscription_weight), more than upstream.subscriptions_per_connection = \(self.capacity) allows on one connection: split it"
            )
        }
        if let slot = self.slots.first(where: { self.load(on: $0, extra: extra($0)) + weight <= self.capacity }) { return .on(slot: slot) }
        guard self.slots.count < self.maxConnections else {
            return .refused(
                "all upstream.connections = \(self.maxConnections) connections hold upstream.subscriptions_per_connection = \(self.capacity) subscriptions: end some, or raise either setting"
            )
        }
        return .open(slot: (0...).first { !self.slots.contains($0) }!)
    }

    /// A connection opened at `slot` (as `slot(forNew:)` said).
    public mutating func opened(_ slot: Int) {
        guard !self.slots.contains(slot) else { return }
        self.slots.append(slot)
        self.slots.sort()
    }

    /// Places sticky key `key` of `weight`: where it is already, or as `slot(forNew:)` says
    /// (the pool opens the connection for `.open` and calls `opened`; the key is placed there).
    public mutating func place(_ key: String, weight: Int, extra: (Int) -> Int = { _ in 0 }) -> Placement {
        if let placed = self.keys[key] { return .on(slot: placed.slot) }
        let placement = self.slot(forNew: weight, what: "this sticky send", extra: extra)
        switch placement {
        case .on(let slot), .open(let slot):
            self.keys[key] = (slot, weight)
            self.weights[slot, default: 0] += weight
        case .refused:
            break
        }
        return placement
    }

    /// Key `key` went: its place is free. The slot to retire, when that left it empty.
    public mutating func release(_ key: String, extra: (Int) -> Int = { _ in 0 }) -> Int? {
        guard let (slot, weight) = self.keys.removeValue(forKey: key) else { return nil }
        self.weights[slot, default: 0] -= weight
        return self.retirable(slot, extra: extra(slot)) ? slot : nil
    }

    /// Whether connection `slot` has nothing on it and may close (never the first).
    public func retirable(_ slot: Int, extra: Int) -> Bool {
        slot != 0 && self.slots.contains(slot) && self.load(on: slot, extra: extra) <= 0
    }

    /// Connection `slot` closed for good: its slot is free again.
    public mutating func retired(_ slot: Int) {
        guard slot != 0 else { return }
        self.slots.removeAll { $0 == slot }
        self.weights[slot] = nil
        self.keys = self.keys.filter { $0.value.slot != slot }
    }
}
