import Testing
import WSBridgeCore
import WSBridgeProtocol

/// The close handshake's states and the actions they return (RFC 6455 §5.5.1, §7.1.2).
@Suite struct CloseHandshakeTests {
    @Test func oursFirstGoesOnceThenTheServersEchoEndsIt() {
        var h = CloseHandshake()
        #expect(h.mayWrite)
        #expect(h.close(code: 1001, reason: "bye") == .sendClose(code: 1001, reason: "bye"))
        #expect(!h.mayWrite && h.state == .sent && h.serverClose == nil)
        // A second close (the daemon stopping while an operator's close is under way) sends nothing.
        #expect(h.close(code: 1000, reason: "") == .none)
        #expect(h.received(code: 1001, reason: "") == .none)
        #expect(h.state == .done(code: 1001, reason: ""))
        #expect(h.serverClose?.code == 1001)
    }

    @Test func theServersFirstIsEchoedWithItsCodeAndOnlyTheFirstCounts() {
        var h = CloseHandshake()
        #expect(h.received(code: 4002, reason: "maintenance") == .sendClose(code: 4002, reason: ""))
        #expect(!h.mayWrite)
        #expect(h.received(code: 1000, reason: "again") == .none)
        #expect(h.serverClose?.code == 4002 && h.serverClose?.reason == "maintenance")
        #expect(h.close(code: 1000, reason: "") == .none)
    }

    @Test func aCloseWithoutACodeIsEchoedWith1000() {
        var h = CloseHandshake()
        #expect(h.received(code: nil, reason: "") == .sendClose(code: 1000, reason: ""))
        #expect(h.serverClose?.code == nil)
    }

    @Test func theMachineSaysWhenTheDaemonIsStopping() throws {
        var m = LinkStateMachine(
            settings: .init(backoff: BackoffPolicy(), maxAttempts: 0), networkAvailable: true, now: MonotonicInstant(nanoseconds: 0),
            generator: SystemRandomNumberGenerator())
        #expect(!m.isShuttingDown)
        _ = try m.connectRequested(now: MonotonicInstant(nanoseconds: 1))
        #expect(!m.isShuttingDown)
        _ = m.shutdown(now: MonotonicInstant(nanoseconds: 2))
        #expect(m.isShuttingDown && m.phase == .stopped)
    }
}
