import Testing

@testable import WSBridgeCore

/// A renewal's life as the link's machine decides it (`RenewalMachine`): when one may start,
/// the second connection restored and taking over, the old one closing once its requests are
/// answered, a failure and its retry, a renewal asked for while the old connection closes, and
/// late inputs of a connection that is gone changing nothing.
@Suite struct RenewalMachineTests {
    static let t0 = MonotonicInstant(nanoseconds: 1_000_000_000)

    /// A machine whose renewal (`upstream.max_lifetime`) restored its second connection with
    /// sticky key `k1` sent on it.
    static func restored() -> RenewalMachine {
        var m = RenewalMachine()
        let ask = m.ask(why: "max_lifetime", linkOpen: true)
        let started = m.start(why: "max_lifetime", now: t0)
        #expect(ask == .mayStart && started)
        #expect(m.underway == "opening" && !m.successorReady)
        let ready = m.ready(sent: ["k1"])
        #expect(ready)
        return m
    }

    @Test func aRenewalRunsFromItsSecondConnectionToTheOldOnesEnd() {
        var m = Self.restored()
        m.sent("k2")
        #expect(m.successorReady && m.sentKeys == ["k1", "k2"])
        let took = m.tookOver(now: Self.t0 + .milliseconds(250), wallMillis: 42)
        #expect(took == .milliseconds(250))
        #expect(m.count == 1 && m.last == .init(atMillis: 42, overlapMs: 250, why: "max_lifetime", failure: nil))
        #expect(m.underway == "closing")
        let waiting = m.oldEnded()
        #expect(waiting == nil)
        #expect(m.phase == .idle && m.underway == nil)
    }

    @Test func oneRenewalAtATimeAndOneAskedWhileTheOldClosesWaitsForItsEnd() {
        var m = RenewalMachine()
        let closed = m.ask(why: "notice", linkOpen: false)
        #expect(closed == .ignored)
        m = Self.restored()
        // Another while the second connection opens: nothing (the one under way renews it).
        let whileOpening = m.ask(why: "notice", linkOpen: true)
        #expect(whileOpening == .ignored)
        _ = m.tookOver(now: Self.t0, wallMillis: 1)
        // While the old one closes: kept, and started when it ended.
        let whileClosing = m.ask(why: "notice", linkOpen: true)
        #expect(whileClosing == .afterOldEnds && m.waiting == "notice")
        let startedEarly = m.start(why: "notice", now: Self.t0)
        #expect(!startedEarly, "a renewal cannot start while the old connection closes")
        let waiting = m.oldEnded()
        #expect(waiting == "notice" && m.waiting == nil && m.phase == .idle)
        let started = m.start(why: "notice", now: Self.t0)
        #expect(started)
    }

    @Test func aFailureKeepsTheOldConnectionAndALifetimesRenewalIsTriedAgain() {
        var m = Self.restored()
        let retry = m.failed("did not deliver", wallMillis: 7, lifetimeSet: true, retry: .seconds(10))
        #expect(retry == .seconds(10))
        #expect(m.phase == .idle && m.count == 0 && m.failed == 1)
        #expect(m.last == .init(atMillis: 7, overlapMs: nil, why: "max_lifetime", failure: "did not deliver"))
        // A notice's renewal (no lifetime) is not tried again; a failure before the second
        // connection was restored counts as well.
        let ask = m.ask(why: "notice", linkOpen: true)
        let started = m.start(why: "notice", now: Self.t0)
        let noRetry = m.failed("refused", wallMillis: 8, lifetimeSet: false, retry: .seconds(10))
        #expect(ask == .mayStart && started && noRetry == nil)
        #expect(m.failed == 2)
    }

    @Test func lateInputsOfAConnectionThatIsGoneChangeNothing() {
        var m = RenewalMachine()
        let idle = (
            m.ready(sent: []), m.tookOver(now: Self.t0, wallMillis: 1), m.failed("late", wallMillis: 1, lifetimeSet: true, retry: .seconds(1)),
            m.oldEnded()
        )
        #expect(!idle.0 && idle.1 == nil && idle.2 == nil && idle.3 == nil)
        #expect(m.phase == .idle && m.failed == 0)
        // Not restored: it cannot take over.
        let started = m.start(why: "x", now: Self.t0)
        let early = m.tookOver(now: Self.t0, wallMillis: 1)
        #expect(started && early == nil)
        // Taken over: a failure of the connection that was the successor is late.
        _ = m.ready(sent: [])
        _ = m.tookOver(now: Self.t0, wallMillis: 1)
        let late = m.failed("late", wallMillis: 1, lifetimeSet: true, retry: .seconds(1))
        #expect(late == nil)
        #expect(m.count == 1 && m.failed == 0)
        // The link's connection went: everything under way goes, the counts stay.
        _ = m.ask(why: "notice", linkOpen: true)
        m.abandon()
        #expect(m.phase == .idle && m.waiting == nil && m.count == 1)
    }

    @Test func aLifetimeEndsItsJitterEarlierAndNeverAtOnce() {
        let at = Self.t0
        #expect(RenewalMachine.lifetimeEnds(upgradedAt: at, lifetime: .seconds(60), jitterTaken: .seconds(5)) == at + .seconds(55))
        #expect(RenewalMachine.lifetimeEnds(upgradedAt: at, lifetime: .seconds(1), jitterTaken: .seconds(5)) == at + .milliseconds(1))
    }
}
