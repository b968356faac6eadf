import Testing
import WSBridgeCore

@Suite struct HeartbeatStateMachineTests {
    func machine() -> HeartbeatStateMachine {
        HeartbeatStateMachine(interval: .seconds(20), deadline: .seconds(10), now: t(0))
    }

    @Test func firstPingIsDueOneIntervalAfterOpen() {
        var hb = self.machine()
        #expect(hb.next(now: t(0)) == .wait(until: t(20)))
        #expect(hb.next(now: t(19.999)) == .wait(until: t(20)))
        #expect(hb.next(now: t(20)) == .sendPing(payload: 1))
        // After the ping: wake at the deadline.
        #expect(hb.next(now: t(20)) == .wait(until: t(30)))
    }

    @Test func pongMeasuresRoundTripAndClearsTheDeadline() {
        var hb = self.machine()
        #expect(hb.next(now: t(20)) == .sendPing(payload: 1))
        #expect(hb.receivedPong(payload: 1, now: t(20.012)) == .milliseconds(12))
        #expect(hb.roundTripTime == .milliseconds(12))
        #expect(hb.next(now: t(20.012)) == .wait(until: t(40)))
        #expect(hb.next(now: t(30)) == .wait(until: t(40)))
    }

    @Test func silenceAfterPingIsDeathExactlyAtIntervalPlusDeadline() {
        var hb = self.machine()
        #expect(hb.next(now: t(20)) == .sendPing(payload: 1))
        #expect(hb.next(now: t(29.999)) == .wait(until: t(30)))
        #expect(hb.next(now: t(30)) == .dead(silence: .seconds(30)))
    }

    @Test func inboundDataCountsAsLiveness() {
        var hb = self.machine()
        #expect(hb.next(now: t(20)) == .sendPing(payload: 1))
        // The server is busy and its pong is slow, but data flows: not dead.
        hb.received(now: t(25))
        #expect(hb.next(now: t(30)) == .wait(until: t(40)))
        #expect(hb.next(now: t(40)) == .sendPing(payload: 2))
        hb.received(now: t(41))
        #expect(hb.next(now: t(50)) == .wait(until: t(60)))
    }

    @Test func busyLinkStillPingsEveryIntervalForRtt() {
        var hb = self.machine()
        for second in stride(from: 0.5, to: 20, by: 0.5) { hb.received(now: t(second)) }
        #expect(hb.next(now: t(20)) == .sendPing(payload: 1))
    }

    @Test func unmatchedPongDoesNotMeasureRtt() {
        var hb = self.machine()
        #expect(hb.next(now: t(20)) == .sendPing(payload: 1))
        #expect(hb.receivedPong(payload: 99, now: t(20.5)) == nil)
        #expect(hb.receivedPong(payload: nil, now: t(20.5)) == nil)
        #expect(hb.roundTripTime == nil)
        // But it still counts as liveness.
        #expect(hb.next(now: t(30)) == .wait(until: t(40)))
    }

    @Test func deadlineLongerThanIntervalKeepsEarliestUnansweredPing() {
        var hb = HeartbeatStateMachine(interval: .seconds(5), deadline: .seconds(12), now: t(0))
        #expect(hb.next(now: t(5)) == .sendPing(payload: 1))
        #expect(hb.next(now: t(10)) == .sendPing(payload: 2))
        #expect(hb.next(now: t(15)) == .sendPing(payload: 3))
        #expect(hb.next(now: t(17)) == .dead(silence: .seconds(17)))
    }

    @Test func checkNowPingsImmediately() {
        var hb = self.machine()
        hb.checkNow(now: t(3))
        #expect(hb.next(now: t(3)) == .sendPing(payload: 1))
        #expect(hb.next(now: t(13)) == .dead(silence: .seconds(13)))
    }

    @Test func updateShortensTheInterval() {
        var hb = self.machine()
        hb.update(interval: .seconds(2), deadline: .seconds(1), now: t(1))
        #expect(hb.next(now: t(1)) == .wait(until: t(3)))
        #expect(hb.next(now: t(3)) == .sendPing(payload: 1))
        #expect(hb.next(now: t(4)) == .dead(silence: .seconds(4)))
    }
}
