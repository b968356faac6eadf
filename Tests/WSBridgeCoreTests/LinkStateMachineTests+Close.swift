import Testing
import WSBridgeCore
import WSBridgeProtocol

/// The operator's close, connect and reconnect, the daemon's shutdown, and impossible inputs.
extension LinkStateMachineTests {
    // MARK: - User close and connect

    @Test func userCloseStaysClosed() throws {
        var m = try self.openMachine()
        #expect(m.userClose(code: 1000, reason: "bye", now: t(2)) == .sendClose(code: 1000, reason: "bye"))
        #expect(m.phase == .closing)
        #expect(try m.disconnected(.serverClosed(code: 1000, reason: "bye"), now: t(2.1)) == .none)
        #expect(m.phase == .idle)
        #expect(m.lastDisconnect == .userClosed(code: 1000, reason: "bye"))
        // The network coming and going does not reopen it.
        #expect(m.networkChanged(available: false, now: t(3)) == .none)
        #expect(m.networkChanged(available: true, now: t(4)) == .none)
        #expect(m.phase == .idle)
        #expect(try m.connectRequested(now: t(5)) == .connect(attempt: 1))
    }

    @Test func userCloseInEveryOtherState() throws {
        var connecting = self.machine()
        _ = try connecting.connectRequested(now: t(0))
        #expect(connecting.userClose(now: t(1)) == .abort(.userClosed(code: 1000, reason: "")))
        #expect(connecting.phase == .idle)

        var backingOff = self.machine()
        _ = try backingOff.connectRequested(now: t(0))
        _ = try backingOff.connectFailed(.error("x"), now: t(0))
        #expect(backingOff.userClose(now: t(1)) == .cancelRetry)
        #expect(backingOff.phase == .idle)

        var waiting = self.machine(network: false)
        _ = try waiting.connectRequested(now: t(0))
        #expect(waiting.userClose(now: t(1)) == .none)
        #expect(waiting.phase == .idle)
        #expect(waiting.networkChanged(available: true, now: t(2)) == .none)

        var idle = self.machine()
        #expect(idle.userClose(now: t(1)) == .none)
        #expect(idle.phase == .idle)
    }

    @Test func connectWhileBackingOffSkipsTheDelay() throws {
        var m = self.machine()
        _ = try m.connectRequested(now: t(0))
        _ = try m.connectFailed(.error("x"), now: t(0))
        #expect(try m.connectRequested(now: t(0.5)) == .connect(attempt: 2))
        #expect(m.phase == .connecting)
    }

    @Test func connectWhileOpenOrConnectingIsANoOp() throws {
        var m = try self.openMachine()
        #expect(try m.connectRequested(now: t(2)) == .none)
        #expect(m.phase == .open)
        var c = self.machine()
        _ = try c.connectRequested(now: t(0))
        #expect(try c.connectRequested(now: t(0.1)) == .none)
    }

    @Test func connectDuringUserCloseReconnectsAfterTheClose() throws {
        var m = try self.openMachine()
        _ = m.userClose(now: t(2))
        #expect(try m.connectRequested(now: t(2.1)) == .none)
        #expect(try m.disconnected(.serverClosed(code: 1000, reason: ""), now: t(2.2)) == .connect(attempt: 1))
    }

    // MARK: - Reconnect

    @Test func reconnectClosesThenConnectsWithoutBackoff() throws {
        var m = try self.openMachine()
        #expect(try m.reconnectRequested(now: t(2)) == .sendClose(code: 1000, reason: "reconnect requested"))
        #expect(m.phase == .closing)
        #expect(try m.disconnected(.serverClosed(code: 1000, reason: ""), now: t(2.1)) == .connect(attempt: 1))
        // The server's echo ended the connection, but the user closed it.
        #expect(m.lastDisconnect == .userClosed(code: 1000, reason: "reconnect requested"))
        #expect(m.lastDisconnect?.initiator == .user)
        #expect(try m.upgraded(readyGate: false, now: t(2.2)) == .none)
        #expect(m.reconnects == 1)
    }

    @Test func reconnectInOtherStates() throws {
        var connecting = self.machine()
        _ = try connecting.connectRequested(now: t(0))
        #expect(try connecting.reconnectRequested(now: t(1)) == .abortAndConnect(attempt: 1))

        var idle = self.machine()
        #expect(try idle.reconnectRequested(now: t(0)) == .connect(attempt: 1))

        var backingOff = self.machine()
        _ = try backingOff.connectRequested(now: t(0))
        _ = try backingOff.connectFailed(.error("x"), now: t(0))
        #expect(try backingOff.reconnectRequested(now: t(0.1)) == .connect(attempt: 2))

        var closing = try self.openMachine()
        _ = closing.userClose(now: t(2))
        #expect(try closing.reconnectRequested(now: t(2.1)) == .none)
        #expect(try closing.disconnected(.userClosed(code: 1000, reason: ""), now: t(2.2)) == .connect(attempt: 1))
    }

    @Test func userCloseAfterReconnectRequestWins() throws {
        var m = try self.openMachine()
        _ = try m.reconnectRequested(now: t(2))
        #expect(m.userClose(code: 4000, reason: "stop", now: t(2.05)) == .none)
        #expect(try m.disconnected(.serverClosed(code: 1000, reason: ""), now: t(2.1)) == .none)
        #expect(m.phase == .idle)
    }

    // MARK: - Shutdown

    @Test func shutdownClosesWithGoingAway() throws {
        var m = try self.openMachine()
        #expect(m.shutdown(now: t(3)) == .sendClose(code: 1001, reason: "wsbridged shutting down"))
        #expect(m.phase == .closing)
        #expect(try m.disconnected(.serverClosed(code: 1001, reason: ""), now: t(3.1)) == .none)
        #expect(m.phase == .stopped)
        #expect(m.lastDisconnect == .daemonStopped)
        #expect(m.lastDisconnect?.initiator == .daemon)
        #expect(m.lastDisconnect?.description == "closed by the daemon: wsbridged is stopping (code 1001)")
    }

    @Test func shutdownFromEveryOtherState() throws {
        var idle = self.machine()
        #expect(idle.shutdown(now: t(0)) == .none)
        #expect(idle.phase == .stopped)

        var connecting = self.machine()
        _ = try connecting.connectRequested(now: t(0))
        #expect(connecting.shutdown(now: t(0.1)) == .abort(.error("shutting down")))
        #expect(connecting.phase == .stopped)

        var backingOff = self.machine()
        _ = try backingOff.connectRequested(now: t(0))
        _ = try backingOff.connectFailed(.error("x"), now: t(0))
        #expect(backingOff.shutdown(now: t(0.1)) == .cancelRetry)

        var closing = try self.openMachine()
        _ = closing.userClose(now: t(2))
        #expect(closing.shutdown(now: t(2.1)) == .none)
        #expect(try closing.disconnected(.serverClosed(code: 1000, reason: ""), now: t(2.2)) == .none)
        #expect(closing.phase == .stopped)

        var waiting = self.machine(network: false)
        _ = try waiting.connectRequested(now: t(0))
        #expect(waiting.shutdown(now: t(1)) == .none)
        #expect(waiting.phase == .stopped)
        #expect(waiting.networkChanged(available: true, now: t(2)) == .none)
    }

    // MARK: - Impossible inputs are reported, never silently absorbed

    @Test func impossibleInputsThrow() throws {
        var idle = self.machine()
        #expect(throws: Machine.InvalidTransition(input: "upgraded", phase: .idle)) {
            try idle.upgraded(readyGate: false, now: t(0))
        }
        #expect(throws: Machine.InvalidTransition(input: "connectFailed", phase: .idle)) {
            try idle.connectFailed(.error("x"), now: t(0))
        }
        #expect(throws: Machine.InvalidTransition(input: "disconnected", phase: .idle)) {
            try idle.disconnected(.error("x"), now: t(0))
        }
        #expect(throws: Machine.InvalidTransition(input: "retryTimerFired", phase: .idle)) {
            try idle.retryTimerFired(now: t(0))
        }

        var open = try self.openMachine()
        #expect(throws: Machine.InvalidTransition(input: "upgraded", phase: .open)) {
            try open.upgraded(readyGate: false, now: t(2))
        }
        #expect(throws: Machine.InvalidTransition(input: "retryTimerFired", phase: .open)) {
            try open.retryTimerFired(now: t(2))
        }
        #expect(throws: Machine.InvalidTransition(input: "connectFailed", phase: .open)) {
            try open.connectFailed(.error("x"), now: t(2))
        }

        var connecting = self.machine()
        _ = try connecting.connectRequested(now: t(0))
        #expect(throws: Machine.InvalidTransition(input: "disconnected", phase: .connecting)) {
            try connecting.disconnected(.error("x"), now: t(0))
        }

        var waiting = self.machine(network: false)
        _ = try waiting.connectRequested(now: t(0))
        #expect(throws: Machine.InvalidTransition(input: "retryTimerFired", phase: .waitingForNetwork)) {
            try waiting.retryTimerFired(now: t(0))
        }

        var stopped = self.machine()
        _ = stopped.shutdown(now: t(0))
        #expect(throws: Machine.InvalidTransition(input: "connect", phase: .stopped)) {
            try stopped.connectRequested(now: t(1))
        }
        #expect(throws: Machine.InvalidTransition(input: "reconnect", phase: .stopped)) {
            try stopped.reconnectRequested(now: t(1))
        }
        #expect(throws: Machine.InvalidTransition(input: "disconnected", phase: .stopped)) {
            try stopped.disconnected(.error("x"), now: t(1))
        }

        var backingOff = self.machine()
        _ = try backingOff.connectRequested(now: t(0))
        _ = try backingOff.connectFailed(.error("x"), now: t(0))
        #expect(throws: Machine.InvalidTransition(input: "upgraded", phase: .backingOff)) {
            try backingOff.upgraded(readyGate: false, now: t(1))
        }
    }

    /// With a ready gate the attempt waits after the upgrade, still `connecting`: only `ready`
    /// opens it; a failure, a lost network, a reconnect, a close or a stop end the wait as they
    /// end any attempt.
    @Test func theReadyWaitIsAStepOfTheAttempt() throws {
        var m = self.machine()
        _ = try m.connectRequested(now: t(0))
        #expect(m.attemptStep == .handshaking)
        #expect(throws: Machine.InvalidTransition(input: "ready", phase: .connecting)) { try m.ready(now: t(1)) }
        #expect(try m.upgraded(readyGate: true, now: t(1)) == .none)
        #expect(m.phase == .connecting && m.attemptStep == .awaitingReady && m.phaseSince == t(0))
        #expect(throws: Machine.InvalidTransition(input: "upgraded", phase: .connecting)) { try m.upgraded(readyGate: true, now: t(2)) }
        #expect(try m.ready(now: t(2)) == .none)
        #expect(m.phase == .open && m.attemptStep == nil && m.openSince == t(2))

        var failed = self.machine()
        _ = try failed.connectRequested(now: t(0))
        _ = try failed.upgraded(readyGate: true, now: t(1))
        #expect(try failed.connectFailed(.error("not ready"), now: t(2)) != .none)
        #expect(failed.phase == .backingOff && failed.attemptStep == nil && failed.failures == 1)

        var reconnecting = self.machine()
        _ = try reconnecting.connectRequested(now: t(0))
        _ = try reconnecting.upgraded(readyGate: true, now: t(1))
        #expect(try reconnecting.reconnectRequested(now: t(2)) == .abortAndConnect(attempt: 1))

        var lost = self.machine()
        _ = try lost.connectRequested(now: t(0))
        _ = try lost.upgraded(readyGate: true, now: t(1))
        #expect(lost.networkChanged(available: false, now: t(2)) == .abort(.networkLost))
        #expect(lost.phase == .waitingForNetwork)
        // Back: a new attempt starts at its first step.
        #expect(lost.networkChanged(available: true, now: t(3)) == .connect(attempt: 1))
        #expect(lost.attemptStep == .handshaking)

        var closed = self.machine()
        _ = try closed.connectRequested(now: t(0))
        _ = try closed.upgraded(readyGate: true, now: t(1))
        #expect(closed.userClose(now: t(2)) == .abort(.userClosed(code: 1000, reason: "")))
        #expect(closed.phase == .idle)

        var stopping = self.machine()
        _ = try stopping.connectRequested(now: t(0))
        _ = try stopping.upgraded(readyGate: true, now: t(1))
        #expect(stopping.shutdown(now: t(2)) == .abort(.error("shutting down")))
        #expect(stopping.phase == .stopped)
    }

    @Test func phaseSinceTracksTransitions() throws {
        var m = self.machine()
        _ = try m.connectRequested(now: t(1))
        #expect(m.phaseSince == t(1))
        _ = try m.upgraded(readyGate: false, now: t(2))
        #expect(m.phaseSince == t(2))
        _ = m.networkChanged(available: true, now: t(3))
        #expect(m.phaseSince == t(2))
    }
}

extension LinkStateMachineTests {
    /// A renewal (issue 44) moves the open link to a new connection: still open, no reconnect,
    /// the new connection's close handshake and time open its own (through the link's
    /// supervisor, which holds the new connection's context until then).
    @Test func aRenewedLinkStaysOpenWithANewConnectionsState() throws {
        var s = LinkSupervisor(link: try self.openMachine())
        _ = s.takeTransition()
        let started = s.startRenewal(why: "test", now: t(5))
        s.renewalReady(sent: [])
        // The old connection's server sent its close frame: nothing more may go on it.
        _ = s.connection { $0.closeFrameReceived(code: 1001, reason: "going away") }
        #expect(started && !s.link.mayWrite)
        let took = s.renewalTookOver(now: t(10), wallMillis: 0)
        #expect(took == .seconds(5))
        #expect(s.link.phase == .open && s.link.mayWrite && s.link.openSince == t(10))
        let transition = s.takeTransition()
        #expect(s.link.reconnects == 0 && transition == nil)
        // The old one's close handshake went with it: the server's came first, so none goes.
        #expect(!s.otherMayWrite)
        let close = s.renewalClosingOld()
        #expect(close == nil)
        // Only an open link is renewed.
        var idle = LinkSupervisor(link: self.machine())
        let refused = !idle.startRenewal(why: "test", now: t(1))
        #expect(refused && idle.link.phase == .idle)
    }
}
