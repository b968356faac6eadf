import Testing
import WSBridgeCore
import WSBridgeProtocol

typealias Machine = ConnectionStateMachine<MaxGenerator>

@Suite struct ConnectionStateMachineTests {
    let settings = Machine.Settings(
        backoff: BackoffPolicy(base: .seconds(1), cap: .seconds(8), stableAfter: .seconds(30)),
        maxAttempts: 0
    )

    func machine(network: Bool = true, maxAttempts: Int = 0) -> Machine {
        var s = self.settings
        s.maxAttempts = maxAttempts
        return Machine(settings: s, networkAvailable: network, now: t(0), generator: MaxGenerator())
    }

    /// A machine driven to `open` at t(1).
    func openMachine() throws -> Machine {
        var m = self.machine()
        #expect(try m.connectRequested(now: t(0)) == .connect(attempt: 1))
        #expect(try m.upgraded(readyGate: false, now: t(1)) == .none)
        #expect(m.phase == .open)
        return m
    }

    // MARK: - Happy path

    @Test func startsIdleAndConnectsOnRequest() throws {
        var m = self.machine()
        #expect(m.phase == .idle)
        #expect(try m.connectRequested(now: t(0)) == .connect(attempt: 1))
        #expect(m.phase == .connecting)
        #expect(try m.upgraded(readyGate: false, now: t(0.2)) == .none)
        #expect(m.phase == .open)
        #expect(m.openSince == t(0.2))
        #expect(m.reconnects == 0)
    }

    @Test func connectWithoutNetworkWaitsWithoutSpendingAttempts() throws {
        var m = self.machine(network: false)
        #expect(try m.connectRequested(now: t(0)) == .none)
        #expect(m.phase == .waitingForNetwork)
        #expect(m.failures == 0)
        #expect(m.networkChanged(available: true, now: t(5)) == .connect(attempt: 1))
        #expect(m.phase == .connecting)
    }

    // MARK: - Failures and backoff

    @Test func failedAttemptsBackOffExponentially() throws {
        var m = self.machine()
        _ = try m.connectRequested(now: t(0))
        #expect(try m.connectFailed(.error("refused"), now: t(0)) == .scheduleRetry(after: .seconds(2), attempt: 2))
        #expect(m.phase == .backingOff)
        #expect(m.retryAt == t(2))
        #expect(try m.retryTimerFired(now: t(2)) == .connect(attempt: 2))
        #expect(try m.connectFailed(.error("refused"), now: t(2)) == .scheduleRetry(after: .seconds(4), attempt: 3))
        #expect(try m.retryTimerFired(now: t(6)) == .connect(attempt: 3))
        #expect(try m.connectFailed(.error("refused"), now: t(6)) == .scheduleRetry(after: .seconds(8), attempt: 4))
        #expect(try m.retryTimerFired(now: t(14)) == .connect(attempt: 4))
        // Capped.
        #expect(try m.connectFailed(.error("refused"), now: t(14)) == .scheduleRetry(after: .seconds(8), attempt: 5))
        #expect(m.failures == 4)
        #expect(m.lastDisconnect == .error("refused"))
    }

    @Test func serverCloseReconnectsWithBackoff() throws {
        var m = try self.openMachine()
        // Open for 40 s (past stable_after): a fresh first retry.
        let action = try m.disconnected(.serverClosed(code: 1001, reason: "restart"), now: t(41))
        #expect(action == .scheduleRetry(after: .seconds(1), attempt: 1))
        #expect(m.phase == .backingOff)
        #expect(m.lastDisconnect?.initiator == .server)
        #expect(try m.retryTimerFired(now: t(42)) == .connect(attempt: 1))
        #expect(try m.upgraded(readyGate: false, now: t(42.1)) == .none)
        #expect(m.reconnects == 1)
    }

    /// A server that closes right after every open: each close before stable_after is a failed
    /// attempt, so the delays grow to the cap instead of looping at the base.
    @Test func aServerThatClosesRightAfterOpenMeetsAGrowingBackoff() throws {
        var m = try self.openMachine()
        var now = 1.0
        var delays: [Duration] = []
        for _ in 0..<6 {
            now += 0.05
            let action = try m.disconnected(.serverClosed(code: 4409, reason: "Subscriber for 1 already exists"), now: t(now))
            guard case .scheduleRetry(let delay, _) = action else {
                Issue.record("no retry: \(action)")
                return
            }
            delays.append(delay)
            now += delay.seconds
            _ = try m.retryTimerFired(now: t(now))
            _ = try m.upgraded(readyGate: false, now: t(now))
        }
        // The test generator draws the ceiling: base 1 s doubling to the 8 s cap.
        #expect(delays == [.seconds(2), .seconds(4), .seconds(8), .seconds(8), .seconds(8), .seconds(8)])
        #expect(m.failures == 6)
    }

    @Test func attemptsResetOnlyAfterStableUptime() throws {
        var m = self.machine()
        _ = try m.connectRequested(now: t(0))
        _ = try m.connectFailed(.error("x"), now: t(0))
        _ = try m.retryTimerFired(now: t(2))
        _ = try m.connectFailed(.error("x"), now: t(2))
        _ = try m.retryTimerFired(now: t(6))
        #expect(m.failures == 2)
        _ = try m.upgraded(readyGate: false, now: t(6))
        // Open for 10 s only (< stable_after 30 s): one more failed attempt.
        #expect(try m.disconnected(.error("reset"), now: t(16)) == .scheduleRetry(after: .seconds(8), attempt: 4))
        #expect(m.failures == 3)
        _ = try m.retryTimerFired(now: t(20))
        _ = try m.upgraded(readyGate: false, now: t(20))
        // Open for 30 s: reset.
        #expect(try m.disconnected(.error("reset"), now: t(50)) == .scheduleRetry(after: .seconds(1), attempt: 1))
        #expect(m.failures == 0)
    }

    @Test func maxAttemptsGivesUpToIdle() throws {
        var m = self.machine(maxAttempts: 2)
        _ = try m.connectRequested(now: t(0))
        #expect(try m.connectFailed(.error("refused"), now: t(0)) == .scheduleRetry(after: .seconds(2), attempt: 2))
        _ = try m.retryTimerFired(now: t(2))
        #expect(try m.connectFailed(.error("refused"), now: t(2)) == .none)
        #expect(m.phase == .idle)
        // A new connect request starts counting again.
        #expect(try m.connectRequested(now: t(10)) == .connect(attempt: 1))
    }

    @Test func failureWithoutNetworkWaitsInsteadOfBackingOff() throws {
        var m = self.machine()
        _ = try m.connectRequested(now: t(0))
        _ = m.networkChanged(available: false, now: t(0.1))
        #expect(m.phase == .waitingForNetwork)
        #expect(m.failures == 0)
    }

    // MARK: - Network

    @Test func networkLossWhileBackingOffCancelsTheTimer() throws {
        var m = self.machine()
        _ = try m.connectRequested(now: t(0))
        _ = try m.connectFailed(.error("x"), now: t(0))
        #expect(m.networkChanged(available: false, now: t(1)) == .cancelRetry)
        #expect(m.phase == .waitingForNetwork)
        #expect(m.networkChanged(available: true, now: t(30)) == .connect(attempt: 2))
    }

    @Test func networkLossWhileOpenDropsTheLink() throws {
        var m = try self.openMachine()
        #expect(m.networkChanged(available: false, now: t(5)) == .abort(.networkLost))
        #expect(m.phase == .waitingForNetwork)
        #expect(m.failures == 0)
        #expect(m.networkChanged(available: true, now: t(9)) == .connect(attempt: 1))
    }

    @Test func networkLossWhileConnectingAbortsTheAttempt() throws {
        var m = self.machine()
        _ = try m.connectRequested(now: t(0))
        #expect(m.networkChanged(available: false, now: t(0.5)) == .abort(.networkLost))
        #expect(m.phase == .waitingForNetwork)
    }

    @Test func networkReturningDuringBackoffConnectsAtOnce() throws {
        var m = self.machine()
        _ = try m.connectRequested(now: t(0))
        _ = try m.connectFailed(.error("x"), now: t(0))
        // A poll may miss the down phase and only see it unavailable in the state machine's flag
        _ = m.networkChanged(available: false, now: t(0.1))
        #expect(m.phase == .waitingForNetwork)
        #expect(m.networkChanged(available: true, now: t(0.2)) == .connect(attempt: 2))
    }

    @Test func repeatedNetworkConfirmationsAreNoOps() throws {
        var m = try self.openMachine()
        #expect(m.networkChanged(available: true, now: t(2)) == .none)
        #expect(m.phase == .open)
        var idle = self.machine()
        #expect(idle.networkChanged(available: false, now: t(1)) == .none)
        #expect(idle.networkChanged(available: true, now: t(2)) == .none)
        #expect(idle.phase == .idle)
    }

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
