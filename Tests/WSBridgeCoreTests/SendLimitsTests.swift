import Testing

@testable import WSBridgeCore

/// The pacing of one connection's writes and the window of connection attempts (issue 44), with
/// time moved by hand.
@Suite struct SendLimitsTests {
    static let t0 = MonotonicInstant(nanoseconds: 1_000_000_000)

    @Test func aBurstGoesAtOnceAndTheRestAtTheRate() {
        var pacer = SendPacer(perSecond: 5, burst: 5, now: Self.t0)
        let burst = (0..<6).map { _ in pacer.take(now: Self.t0) }
        #expect(burst == [true, true, true, true, true, false])
        // The next one in 200 ms, not before.
        let next = pacer.next(now: Self.t0)
        #expect(next == Self.t0 + .milliseconds(200))
        let taken = [199, 200, 200].map { pacer.take(now: Self.t0 + .milliseconds($0)) }
        #expect(taken == [false, true, false])
    }

    @Test func noWindowOfOneSecondHoldsMoreThanTheRateAndTheBurst() {
        // 40 messages offered every 10 ms for 20 s: in any second, at most rate + burst went.
        var pacer = SendPacer(perSecond: 5, burst: 3, now: Self.t0)
        var sent: [MonotonicInstant] = []
        var now = Self.t0
        var waiting = 40
        while now < Self.t0 + .seconds(20) {
            while waiting > 0, pacer.take(now: now) {
                sent.append(now)
                waiting -= 1
            }
            now = now + .milliseconds(10)
        }
        #expect(waiting == 0)
        for (i, start) in sent.enumerated() {
            let inWindow = sent[i...].prefix { $0 - start < .seconds(1) }.count
            #expect(inWindow <= 5 + 3, "\(inWindow) from \(start)")
        }
        // Steady state: one every 200 ms after the burst.
        #expect(sent.last! - sent.first! == .milliseconds(200 * (40 - 3)))
    }

    @Test func creditDoesNotGrowPastTheBurstWhileIdle() {
        var pacer = SendPacer(perSecond: 5, burst: 2, now: Self.t0)
        let later = Self.t0 + .seconds(60)
        let taken = (0..<3).map { _ in pacer.take(now: later) }
        #expect(taken == [true, true, false])
    }

    @Test func attemptsPastTheLimitWaitForTheOldestToLeaveTheWindow() {
        var window = AttemptWindow(limit: 3, window: .seconds(10))
        let first = [0, 1, 2, 3].map { window.admit(now: Self.t0 + .seconds($0)) }
        #expect(first == [true, true, true, false])
        let free = window.next(now: Self.t0 + .seconds(3))
        #expect(free == Self.t0 + .seconds(10))
        let early = window.admit(now: Self.t0 + (.seconds(10) - .nanoseconds(1)))
        let onTime = window.admit(now: Self.t0 + .seconds(10))
        #expect(!early && onTime)
        let count = window.count(now: Self.t0 + .seconds(10))
        let after = window.next(now: Self.t0 + .seconds(10))
        #expect(count == 3 && after == Self.t0 + .seconds(11))
    }

    @Test func noWindowEverHoldsMoreThanTheLimit() {
        // A backoff that would try every 100 ms for 10 minutes: never more than 300 in 5 minutes.
        var window = AttemptWindow(limit: 300, window: .seconds(300))
        var admitted: [MonotonicInstant] = []
        var now = Self.t0
        while now < Self.t0 + .seconds(600) {
            if window.admit(now: now) { admitted.append(now) }
            now = now + .milliseconds(100)
        }
        #expect(admitted.count == 600)
        for (i, start) in admitted.enumerated() {
            #expect(admitted[i...].prefix { $0 - start < .seconds(300) }.count <= 300)
        }
    }
}
