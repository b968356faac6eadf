import WSBridgeProtocol

/// The upstream link's lifecycle as a pure state machine.
///
/// Each input is a `mutating func` that takes the time and returns the `Action` the driver must
/// perform; the machine performs no I/O and never reads a clock. An input that cannot happen in
/// the current state throws `InvalidTransition`: that is a bug in the driver, which logs it.
public struct ConnectionStateMachine<RNG: RandomNumberGenerator> {
    public struct Settings: Sendable, Equatable {
        public var backoff: BackoffPolicy
        /// 0 = forever.
        public var maxAttempts: Int

        public init(backoff: BackoffPolicy = BackoffPolicy(), maxAttempts: Int = 0) {
            self.backoff = backoff
            self.maxAttempts = maxAttempts
        }
    }

    /// What the driver must do after an input.
    public enum Action: Sendable, Equatable {
        case none
        /// Start connection attempt number `attempt` (1-based since the last stable link).
        case connect(attempt: Int)
        /// Arm a timer; when it fires, call `retryTimerFired`.
        case scheduleRetry(after: Duration, attempt: Int)
        /// Disarm the retry timer.
        case cancelRetry
        /// Send a close frame and wait for the server to end the connection.
        case sendClose(code: UInt16, reason: String)
        /// Drop the connection or the attempt in flight now; a `disconnected`/`connectFailed` input is not expected for it.
        case abort(DisconnectReason)
        /// Drop the attempt in flight and start a new one at once.
        case abortAndConnect(attempt: Int)
    }

    /// A change of phase, told once (`takeTransition`): the driver logs and publishes it
    /// without comparing phases itself.
    public struct Transition: Sendable, Equatable {
        public var from: ConnectionPhase
        public var to: ConnectionPhase
        /// Why the link that was open (or closing) ended, when this transition ends it.
        public var lost: DisconnectReason?
        /// The link ended sooner than `backoff.stable_after` after it opened, and not by the
        /// operator's, the daemon's or the network's doing: a failed attempt, the close "right
        /// after open" that the session lays at what it sent last. Decided here only.
        public var closedRightAfterOpen: Bool

        public init(from: ConnectionPhase, to: ConnectionPhase, lost: DisconnectReason? = nil, closedRightAfterOpen: Bool = false) {
            self.from = from
            self.to = to
            self.lost = lost
            self.closedRightAfterOpen = closedRightAfterOpen
        }
    }

    public struct InvalidTransition: Error, Equatable, CustomStringConvertible {
        public var input: String
        public var phase: ConnectionPhase
        public init(input: String, phase: ConnectionPhase) {
            self.input = input
            self.phase = phase
        }
        public var description: String { "invalid input '\(self.input)' in state \(self.phase.rawValue)" }
    }

    @usableFromInline
    enum CloseIntent: Equatable, Sendable {
        case user(code: UInt16, reason: String)
        case reconnect
        case shutdown
    }

    /// Where a connection attempt is (the phase is `connecting` in both).
    public enum AttemptStep: Sendable, Equatable {
        /// The connector, TCP, TLS and the WebSocket upgrade.
        case handshaking
        /// Upgraded; waiting for the message matching `upstream.ready_when`.
        case awaitingReady
    }

    @usableFromInline
    enum State: Equatable, Sendable {
        case idle
        case connecting(AttemptStep)
        case open(since: MonotonicInstant)
        case closing(CloseIntent)
        case waitingForNetwork
        case backingOff(until: MonotonicInstant)
        case stopped
    }

    // Inlinable readers (`attemptStep`, read for every upstream message) see it; only this
    // file changes it.
    @usableFromInline private(set) var state: State = .idle
    private var settings: Settings
    private var generator: RNG
    /// Consecutive failed attempts since the last link that stayed open for `stableAfter`.
    public private(set) var failures = 0
    public private(set) var networkAvailable: Bool
    /// How many times a link was (re)established after the first one.
    public private(set) var reconnects = 0
    private var everOpened = false
    public private(set) var lastDisconnect: DisconnectReason?
    public private(set) var phaseSince: MonotonicInstant
    /// The phase change not yet taken by the driver (`takeTransition`).
    private var untold: (from: ConnectionPhase, to: ConnectionPhase)?
    /// The last link that ended did so before `stable_after`, as a failed attempt.
    private var endedEarly = false

    public init(settings: Settings, networkAvailable: Bool = true, now: MonotonicInstant, generator: RNG) {
        self.settings = settings
        self.networkAvailable = networkAvailable
        self.generator = generator
        self.phaseSince = now
    }

    public var phase: ConnectionPhase { Self.phase(of: self.state) }

    /// The time the next retry is due, while backing off.
    /// The daemon is stopping (or stopped): nothing new may be sent or queued.
    public var isShuttingDown: Bool {
        switch self.state {
        case .closing(.shutdown), .stopped: true
        default: false
        }
    }

    public var retryAt: MonotonicInstant? {
        if case .backingOff(let until) = self.state { return until }
        return nil
    }

    /// The time the current link opened, while open.
    public var openSince: MonotonicInstant? {
        if case .open(let since) = self.state { return since }
        return nil
    }

    public mutating func updateSettings(_ settings: Settings) {
        self.settings = settings
    }

    private mutating func enter(_ state: State, now: MonotonicInstant) {
        let from = self.phase
        let to = Self.phase(of: state)
        self.state = state
        guard from != to else { return }
        self.phaseSince = now
        let first = self.untold?.from ?? from
        self.untold = first == to ? nil : (first, to)
    }

    /// The phase change since the last call, if any (several changes in one input are one).
    public mutating func takeTransition() -> Transition? {
        guard let (from, to) = self.untold else { return nil }
        self.untold = nil
        let ended = (from == .open || from == .closing) && to != .closing
        return Transition(from: from, to: to, lost: ended ? self.lastDisconnect : nil, closedRightAfterOpen: ended && self.endedEarly)
    }

    private static func phase(of state: State) -> ConnectionPhase {
        switch state {
        case .idle: .idle
        case .connecting: .connecting
        case .open: .open
        case .closing: .closing
        case .waitingForNetwork: .waitingForNetwork
        case .backingOff: .backingOff
        case .stopped: .stopped
        }
    }

    private func invalid(_ input: String) -> InvalidTransition {
        InvalidTransition(input: input, phase: self.phase)
    }

    /// Start (or restart) an attempt, or wait for the network if there is none.
    private mutating func attempt(now: MonotonicInstant) -> Action {
        guard self.networkAvailable else {
            self.enter(.waitingForNetwork, now: now)
            return .none
        }
        self.enter(.connecting(.handshaking), now: now)
        return .connect(attempt: self.failures + 1)
    }

    /// After a failure or a lost link: back off, wait for the network, or give up.
    private mutating func retry(after reason: DisconnectReason, now: MonotonicInstant, countsAsFailure: Bool) -> Action {
        self.lastDisconnect = reason
        if countsAsFailure {
            self.failures += 1
            if self.settings.maxAttempts > 0 && self.failures >= self.settings.maxAttempts {
                self.enter(.idle, now: now)
                return .none
            }
        }
        guard self.networkAvailable else {
            self.enter(.waitingForNetwork, now: now)
            return .none
        }
        let delay = self.settings.backoff.delay(attempt: self.failures, using: &self.generator)
        self.enter(.backingOff(until: now + delay), now: now)
        return .scheduleRetry(after: delay, attempt: self.failures + 1)
    }

    /// The operator (or startup) asks for a connection.
    public mutating func connectRequested(now: MonotonicInstant) throws(InvalidTransition) -> Action {
        switch self.state {
        case .idle:
            self.failures = 0
            return self.attempt(now: now)
        case .backingOff:
            self.enter(.connecting(.handshaking), now: now)
            return .connect(attempt: self.failures + 1)
        case .waitingForNetwork, .connecting, .open:
            return .none
        case .closing(.user), .closing(.reconnect):
            self.state = .closing(.reconnect)
            return .none
        case .closing(.shutdown), .stopped:
            throw self.invalid("connect")
        }
    }

    /// The operator asks to drop the current link (if any) and connect again now, without backoff.
    public mutating func reconnectRequested(now: MonotonicInstant) throws(InvalidTransition) -> Action {
        switch self.state {
        case .open:
            self.enter(.closing(.reconnect), now: now)
            return .sendClose(code: 1000, reason: StatusReport.Close.reconnectReason)
        case .connecting:
            guard self.networkAvailable else {
                self.enter(.waitingForNetwork, now: now)
                return .abort(.networkLost)
            }
            return .abortAndConnect(attempt: self.failures + 1)
        case .idle, .backingOff, .waitingForNetwork:
            return try self.connectRequested(now: now)
        case .closing(.user), .closing(.reconnect):
            self.state = .closing(.reconnect)
            return .none
        case .closing(.shutdown), .stopped:
            throw self.invalid("reconnect")
        }
    }

    /// The attempt's step while connecting; nil in every other phase.
    @inlinable
    public var attemptStep: AttemptStep? {
        if case .connecting(let step) = self.state { return step }
        return nil
    }

    /// The upgrade completed: with a ready gate (`upstream.ready_when`) the attempt waits for
    /// the message that makes it ready (`ready`), else the link is open.
    public mutating func upgraded(readyGate: Bool, now: MonotonicInstant) throws(InvalidTransition) -> Action {
        guard case .connecting(.handshaking) = self.state else { throw self.invalid("upgraded") }
        guard !readyGate else {
            self.state = .connecting(.awaitingReady)
            return .none
        }
        return self.opened(now: now)
    }

    /// The message matching the ready gate came: the link is open.
    public mutating func ready(now: MonotonicInstant) throws(InvalidTransition) -> Action {
        guard case .connecting(.awaitingReady) = self.state else { throw self.invalid("ready") }
        return self.opened(now: now)
    }

    private mutating func opened(now: MonotonicInstant) -> Action {
        if self.everOpened { self.reconnects += 1 }
        self.everOpened = true
        self.enter(.open(since: now), now: now)
        return .none
    }

    /// The attempt failed before the link opened (refused, TLS, handshake, timeout).
    public mutating func connectFailed(_ reason: DisconnectReason, now: MonotonicInstant) throws(InvalidTransition) -> Action {
        guard case .connecting = self.state else { throw self.invalid("connectFailed") }
        return self.retry(after: reason, now: now, countsAsFailure: true)
    }

    /// An open (or closing) link ended.
    public mutating func disconnected(_ reason: DisconnectReason, now: MonotonicInstant) throws(InvalidTransition) -> Action {
        switch self.state {
        case .open(let since):
            // A link that ended before it was stable counts as a failed attempt, so a server that
            // closes right after every open meets a growing backoff, not a loop of reconnects.
            let stable = now - since >= self.settings.backoff.stableAfter
            if stable { self.failures = 0 }
            self.endedEarly = !stable
            return self.retry(after: reason, now: now, countsAsFailure: !stable)
        case .closing(.user(let code, let reason)):
            self.endedEarly = false
            self.lastDisconnect = .userClosed(code: code, reason: reason)
            self.enter(.idle, now: now)
            return .none
        case .closing(.reconnect):
            // We sent the close: whatever the server answered, the user asked for it.
            self.endedEarly = false
            self.lastDisconnect = .userClosed(code: 1000, reason: StatusReport.Close.reconnectReason)
            return self.attempt(now: now)
        case .closing(.shutdown):
            self.endedEarly = false
            self.lastDisconnect = .daemonStopped
            self.enter(.stopped, now: now)
            return .none
        case .idle, .connecting, .waitingForNetwork, .backingOff, .stopped:
            throw self.invalid("disconnected")
        }
    }

    /// The backoff timer fired.
    public mutating func retryTimerFired(now: MonotonicInstant) throws(InvalidTransition) -> Action {
        guard case .backingOff = self.state else { throw self.invalid("retryTimerFired") }
        return self.attempt(now: now)
    }

    /// The reachability monitor's verdict changed (or was re-confirmed).
    public mutating func networkChanged(available: Bool, now: MonotonicInstant) -> Action {
        let wasAvailable = self.networkAvailable
        self.networkAvailable = available
        switch (self.state, available) {
        case (.waitingForNetwork, true):
            // The route is back: connect at once, no backoff delay.
            self.enter(.connecting(.handshaking), now: now)
            return .connect(attempt: self.failures + 1)
        case (.backingOff, false):
            self.enter(.waitingForNetwork, now: now)
            return .cancelRetry
        case (.backingOff, true) where !wasAvailable:
            self.enter(.connecting(.handshaking), now: now)
            return .connect(attempt: self.failures + 1)
        case (.connecting, false):
            self.lastDisconnect = .networkLost
            self.enter(.waitingForNetwork, now: now)
            return .abort(.networkLost)
        case (.open, false):
            self.endedEarly = false
            self.lastDisconnect = .networkLost
            self.enter(.waitingForNetwork, now: now)
            return .abort(.networkLost)
        default:
            return .none
        }
    }

    /// The operator closes the link: it stays closed until asked to connect again.
    public mutating func userClose(code: UInt16 = 1000, reason: String = "", now: MonotonicInstant) -> Action {
        switch self.state {
        case .open:
            self.enter(.closing(.user(code: code, reason: reason)), now: now)
            return .sendClose(code: code, reason: reason)
        case .closing(.reconnect):
            self.state = .closing(.user(code: code, reason: reason))
            return .none
        case .connecting:
            self.lastDisconnect = .userClosed(code: code, reason: reason)
            self.enter(.idle, now: now)
            return .abort(.userClosed(code: code, reason: reason))
        case .backingOff:
            self.lastDisconnect = .userClosed(code: code, reason: reason)
            self.enter(.idle, now: now)
            return .cancelRetry
        case .waitingForNetwork:
            self.lastDisconnect = .userClosed(code: code, reason: reason)
            self.enter(.idle, now: now)
            return .none
        case .idle, .closing(.user), .closing(.shutdown), .stopped:
            return .none
        }
    }

    /// The daemon is stopping: close with 1001 (going away) if open.
    public mutating func shutdown(now: MonotonicInstant) -> Action {
        switch self.state {
        case .open:
            self.enter(.closing(.shutdown), now: now)
            return .sendClose(code: 1001, reason: "wsbridged shutting down")
        case .closing:
            self.state = .closing(.shutdown)
            return .none
        case .connecting:
            self.enter(.stopped, now: now)
            return .abort(.error("shutting down"))
        case .backingOff:
            self.enter(.stopped, now: now)
            return .cancelRetry
        case .idle, .waitingForNetwork, .stopped:
            self.enter(.stopped, now: now)
            return .none
        }
    }
}

extension ConnectionStateMachine: Sendable where RNG: Sendable {}
