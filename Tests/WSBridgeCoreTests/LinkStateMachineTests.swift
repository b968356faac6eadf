import Testing
import WSBridgeCore
import WSBridgeProtocol

typealias Machine = LinkStateMachine

@Suite struct LinkStateMachineTests {
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
}
