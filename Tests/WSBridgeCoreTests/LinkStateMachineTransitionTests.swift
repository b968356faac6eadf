import Testing
import WSBridgeCore
import WSBridgeProtocol

/// The machine tells each change of phase once, so the driver compares none itself.
@Suite struct LinkStateMachineTransitionTests {
    func machine() -> Machine {
        Machine(settings: .init(backoff: BackoffPolicy(base: .seconds(1), cap: .seconds(8), stableAfter: .seconds(30))), now: t(0), generator: MaxGenerator())
    }

    @Test func eachChangeOfPhaseIsToldOnce() throws {
        var m = self.machine()
        #expect(m.takeTransition() == nil)
        _ = try m.connectRequested(now: t(0))
        #expect(m.takeTransition() == .init(from: .idle, to: .connecting))
        #expect(m.takeTransition() == nil)
        // Waiting for the ready gate is still `connecting`: nothing to tell.
        _ = try m.upgraded(readyGate: true, now: t(1))
        #expect(m.takeTransition() == nil)
        _ = try m.ready(now: t(2))
        #expect(m.takeTransition() == .init(from: .connecting, to: .open))
    }

    @Test func aLinkThatEndsSaysWhy() throws {
        var m = self.machine()
        _ = try m.connectRequested(now: t(0))
        _ = try m.upgraded(readyGate: false, now: t(1))
        _ = m.takeTransition()
        _ = try m.disconnected(.serverClosed(code: 1012, reason: "restart"), now: t(100))
        #expect(m.takeTransition() == .init(from: .open, to: .backingOff, lost: .serverClosed(code: 1012, reason: "restart")))
        // A failed attempt ends no link.
        _ = try m.retryTimerFired(now: t(101))
        _ = m.takeTransition()
        _ = try m.connectFailed(.error("refused"), now: t(102))
        #expect(m.takeTransition() == .init(from: .connecting, to: .backingOff))
    }

    @Test func anOperatorsCloseEndsTheLinkWhenTheCloseHandshakeDoes() throws {
        var m = self.machine()
        _ = try m.connectRequested(now: t(0))
        _ = try m.upgraded(readyGate: false, now: t(1))
        _ = m.takeTransition()
        #expect(m.userClose(code: 1000, reason: "bye", now: t(2)) == .sendClose(code: 1000, reason: "bye"))
        #expect(m.takeTransition() == .init(from: .open, to: .closing))
        _ = try m.disconnected(.serverClosed(code: 1000, reason: "bye"), now: t(3))
        #expect(m.takeTransition() == .init(from: .closing, to: .idle, lost: .userClosed(code: 1000, reason: "bye")))
    }

    @Test func changesWithinOneInputAreOneTransition() throws {
        // maxAttempts 1: the failed attempt gives up, connecting -> idle in one input.
        var m = Machine(settings: .init(maxAttempts: 1), now: t(0), generator: MaxGenerator())
        _ = try m.connectRequested(now: t(0))
        _ = m.takeTransition()
        _ = try m.connectFailed(.error("refused"), now: t(1))
        #expect(m.takeTransition() == .init(from: .connecting, to: .idle))
        #expect(m.takeTransition() == nil)
    }
}
