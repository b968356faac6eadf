import Testing
import WSBridgeCore
import WSBridgeProtocol

/// Each connection's close handshake lives in the machine's states that have a connection: the
/// machine decides every close frame, and a new attempt starts with none sent either way.
@Suite struct ConnectionContextTests {
    func machine() -> Machine {
        Machine(settings: .init(backoff: BackoffPolicy(base: .seconds(1), cap: .seconds(8), stableAfter: .seconds(30))), now: t(0), generator: MaxGenerator())
    }

    func open() throws -> Machine {
        var m = self.machine()
        _ = try m.connectRequested(now: t(0))
        _ = try m.upgraded(readyGate: false, now: t(1))
        return m
    }

    @Test func theServersCloseIsEchoedOnceAndStopsEveryWrite() throws {
        var m = try self.open()
        #expect(m.mayWrite)
        #expect(m.closeFrameReceived(code: 1012, reason: "restart") == .sendClose(code: 1012, reason: ""))
        #expect(!m.mayWrite)
        #expect(m.serverClose?.code == 1012 && m.serverClose?.reason == "restart")
        // A second close frame (a peer must not send one) and an operator's close send nothing more.
        #expect(m.closeFrameReceived(code: 1000, reason: "") == .none)
        #expect(m.userClose(now: t(2)) == .none)
        #expect(m.phase == .closing)
    }

    @Test func ourCloseGoesOnceWhateverAsksForItAfter() throws {
        var m = try self.open()
        #expect(m.violated(code: 1002) == .sendClose(code: 1002, reason: ""))
        #expect(!m.mayWrite && m.serverClose == nil)
        #expect(m.shutdown(now: t(2)) == .none)
        // The server's answer to ours is not echoed.
        #expect(m.closeFrameReceived(code: 1002, reason: "") == .none)
        #expect(m.serverClose?.code == 1002)
        _ = try m.disconnected(.serverClosed(code: 1002, reason: ""), now: t(3))
        #expect(m.phase == .stopped && !m.mayWrite && m.serverClose == nil)
    }

    @Test func aNewAttemptStartsWithANewHandshake() throws {
        var m = try self.open()
        _ = m.closeFrameReceived(code: 1012, reason: "restart")
        _ = try m.disconnected(.serverClosed(code: 1012, reason: "restart"), now: t(100))
        // Between connections there is none: nothing may be written.
        #expect(m.phase == .backingOff && !m.mayWrite && m.serverClose == nil)
        _ = try m.retryTimerFired(now: t(101))
        _ = try m.upgraded(readyGate: false, now: t(102))
        #expect(m.mayWrite && m.serverClose == nil)
        #expect(m.userClose(now: t(103)) == .sendClose(code: 1000, reason: ""))
    }

    @Test func aReconnectWhileWaitingForTheReadyGateStartsAnAttemptFromItsHandshake() throws {
        var m = self.machine()
        _ = try m.connectRequested(now: t(0))
        _ = try m.upgraded(readyGate: true, now: t(1))
        _ = m.closeFrameReceived(code: 4000, reason: "not yet")
        #expect(m.attemptStep == .awaitingReady && !m.mayWrite)
        #expect(try m.reconnectRequested(now: t(2)) == .abortAndConnect(attempt: 1))
        // The new attempt upgrades (as a new connection does) and may write.
        #expect(m.attemptStep == .handshaking && m.mayWrite)
        _ = try m.upgraded(readyGate: false, now: t(3))
        #expect(m.phase == .open)
    }

    @Test func theHeartbeatRunsFromTheOpenToTheEndOfItsConnection() throws {
        var m = Machine(settings: .init(heartbeat: .init(interval: .seconds(2), deadline: .seconds(1))), now: t(0), generator: MaxGenerator())
        _ = try m.connectRequested(now: t(0))
        _ = try m.upgraded(readyGate: true, now: t(1))
        // Not open yet: no heartbeat.
        #expect(m.heartbeat(now: t(1)) == nil && !m.checkLiveness(now: t(1)))
        _ = try m.ready(now: t(2))
        #expect(m.heartbeat(now: t(2)) == .wait(until: t(4)))
        #expect(m.heartbeat(now: t(4)) == .sendPing(payload: 1))
        #expect(m.receivedPong(payload: 1, now: t(4) + .milliseconds(40)) == .milliseconds(40))
        #expect(m.roundTripTime == .milliseconds(40))
        // Closing: the connection (and its heartbeat) lives until TCP ends.
        _ = m.userClose(now: t(5))
        #expect(m.roundTripTime == .milliseconds(40))
        _ = try m.disconnected(.userClosed(code: 1000, reason: ""), now: t(6))
        #expect(m.heartbeat(now: t(6)) == nil && m.roundTripTime == nil)
        // The next connection starts its own.
        _ = try m.connectRequested(now: t(7))
        _ = try m.upgraded(readyGate: false, now: t(8))
        #expect(m.roundTripTime == nil && m.heartbeat(now: t(8)) == .wait(until: t(10)))
    }
}
