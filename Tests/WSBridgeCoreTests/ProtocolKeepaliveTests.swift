import Testing
import WSBridgeProtocol

@testable import WSBridgeCore

/// The application protocol's keepalive lives in the connection's context: set when the server
/// says so (often before the ready gate opens), run by the machine, ended with the connection.
@Suite struct ProtocolKeepaliveTests {
    func waitingForReady() throws -> Machine {
        var m = Machine(settings: .init(), now: t(0), generator: MaxGenerator())
        _ = try m.connectRequested(now: t(0))
        _ = try m.upgraded(readyGate: true, now: t(1))
        return m
    }

    @Test func setBeforeTheOpenItSendsOnlyOnceOpenAndTheDeadlineHoldsThroughout() throws {
        var m = try self.waitingForReady()
        m.keepaliveSet(AppProtocolTiming(sendEvery: 1000, text: "\n", deadline: 3000), protocol: "stomp", now: t(1))
        #expect(m.keepalive(now: t(1)) == .wait(until: t(2)))
        // Not open yet: the send is skipped, the next one scheduled.
        #expect(m.keepalive(now: t(2)) == .wait(until: t(3)))
        _ = try m.ready(now: t(2.5))
        #expect(m.keepalive(now: t(3)) == .send("\n"))
        #expect(m.keepalive(now: t(3)) == .wait(until: t(4)))
        // Nothing heard in the first deadline (the start counts as heard): checked, not dead.
        #expect(m.keepalive(now: t(4)) == .send("\n"))
        #expect(m.keepalive(now: t(4)) == .wait(until: t(5)))
        m.receivedMessage(now: t(4.5))
        #expect(m.keepalive(now: t(5)) == .send("\n"))
        _ = m.keepalive(now: t(6))
        // A message came before the check at 7; nothing before the check at 10.
        #expect(m.keepalive(now: t(7)) == .send("\n"))
        for s in 8...9 { _ = m.keepalive(now: t(Double(s))) }
        #expect(m.keepalive(now: t(10)) == .dead("stomp: nothing from the server for 3000 ms, past the keepalive deadline the server set on this connection"))
    }

    @Test func aControlFrameIsNotAMessageOfTheProtocol() throws {
        var m = try self.waitingForReady()
        m.keepaliveSet(AppProtocolTiming(deadline: 1000), protocol: "socketio", now: t(1))
        _ = try m.ready(now: t(1))
        m.received(now: t(1.5))
        _ = m.keepalive(now: t(2))
        m.received(now: t(2.5))
        guard case .dead = m.keepalive(now: t(3)) else {
            Issue.record("pongs kept a silent protocol alive")
            return
        }
    }

    @Test func itEndsWithItsConnection() throws {
        var m = try self.waitingForReady()
        m.keepaliveSet(AppProtocolTiming(sendEvery: 1000, text: "2"), protocol: "socketio", now: t(1))
        _ = try m.ready(now: t(1))
        // Closing: no more sends (no frame may follow our close).
        _ = m.userClose(now: t(1.5))
        #expect(m.keepalive(now: t(2)) == nil)
        _ = try m.disconnected(.userClosed(code: 1000, reason: ""), now: t(2))
        _ = try m.connectRequested(now: t(3))
        _ = try m.upgraded(readyGate: false, now: t(3))
        #expect(m.keepalive(now: t(10)) == nil)
        // A timing that sets nothing is no keepalive.
        m.keepaliveSet(AppProtocolTiming(sendEvery: 0, deadline: nil), protocol: "socketio", now: t(10))
        #expect(m.keepalive(now: t(10)) == nil)
    }
}
