import WSBridgeProtocol

/// The upstream link's lifecycle as a pure state machine.
///
/// Each input is a `mutating func` that takes the time and returns the `Action` the driver must
/// perform; the machine performs no I/O and never reads a clock. An input that cannot happen in
/// the current state throws `InvalidTransition`: that is a bug in the driver, which logs it.
public struct LinkStateMachine: Sendable {
    enum CloseIntent: Equatable, Sendable {
        case user(code: UInt16, reason: String)
        case reconnect
        case shutdown
    }

    /// Each connection's own state (`ConnectionContext`: its close handshake, heartbeat and
    /// protocol keepalive) is nested in the states that have a connection, from its attempt to
    /// its end: a new attempt starts a new one, and it ends with them.
    enum State: Equatable, Sendable {
        case idle
        case connecting(AttemptStep, ConnectionContext)
        case open(since: MonotonicInstant, ConnectionContext)
        case closing(CloseIntent, ConnectionContext)
        case waitingForNetwork
        case backingOff(until: MonotonicInstant)
        case stopped
    }

    // Only this file changes it (`set`, `withConnection`).
    private(set) var state: State = .idle
    private(set) var settings: Settings
    /// The backoff's random source (injected: tests use a fixed one). Not a generic parameter:
    /// the daemon calls the machine for every socket read and every send, across modules, and
    /// a generic struct's unspecialized calls pay for its metadata each time.
    private var generator: any RandomNumberGenerator & Sendable
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

    public init(settings: Settings, networkAvailable: Bool = true, now: MonotonicInstant, generator: some RandomNumberGenerator & Sendable) {
        self.settings = settings
        self.networkAvailable = networkAvailable
        self.generator = generator
        self.phaseSince = now
    }

    // Read for every upstream message and every send, so kept beside the state (set by `set`
    // and `withConnection`, the only writers of the state) instead of read out of its payload:
    // a switch over a state that carries a connection's context copies the context.

    public private(set) var phase: ConnectionPhase = .idle
    /// The daemon is stopping (or stopped): nothing new may be sent or queued.
    public private(set) var isShuttingDown = false
    /// No close frame went on the current connection: data, pings and pongs may go on it (false
    /// between connections).
    public private(set) var mayWrite = false
    /// The attempt's step while connecting; nil in every other phase.
    public private(set) var attemptStep: AttemptStep?

    /// Every write of the state but the context's own (`withConnection`) goes through here.
    private mutating func set(_ state: State) {
        self.state = state
        switch state {
        case .connecting(let step, let connection):
            (self.phase, self.isShuttingDown, self.mayWrite, self.attemptStep) = (.connecting, false, connection.close.mayWrite, step)
        case .open(_, let connection):
            (self.phase, self.isShuttingDown, self.mayWrite, self.attemptStep) = (.open, false, connection.close.mayWrite, nil)
        case .closing(let intent, let connection):
            (self.phase, self.isShuttingDown, self.mayWrite, self.attemptStep) = (.closing, intent == .shutdown, connection.close.mayWrite, nil)
        case .idle, .waitingForNetwork, .backingOff, .stopped:
            (self.phase, self.isShuttingDown, self.mayWrite, self.attemptStep) = (Self.phase(of: state), state == .stopped, false, nil)
        }
    }

    /// The time the next retry is due, while backing off.

    public var retryAt: MonotonicInstant? {
        if case .backingOff(let until) = self.state { return until }
        return nil
    }

    /// The time the current link opened, while open.
    public var openSince: MonotonicInstant? {
        if case .open(let since, _) = self.state { return since }
        return nil
    }

    /// New settings (a reload); a running heartbeat takes its new interval and deadline from `now`.
    public mutating func updateSettings(_ settings: Settings, now: MonotonicInstant) {
        self.settings = settings
        guard let heartbeat = settings.heartbeat else { return }
        self.withConnection { $0.heartbeat?.update(interval: heartbeat.interval, deadline: heartbeat.deadline, now: now) }
    }

    private mutating func enter(_ state: State, now: MonotonicInstant) {
        let from = self.phase
        let to = Self.phase(of: state)
        self.set(state)
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
        self.enter(.connecting(.handshaking, ConnectionContext()), now: now)
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
            self.enter(.connecting(.handshaking, ConnectionContext()), now: now)
            return .connect(attempt: self.failures + 1)
        case .waitingForNetwork, .connecting, .open:
            return .none
        case .closing(.user, let connection), .closing(.reconnect, let connection):
            self.set(.closing(.reconnect, connection))
            return .none
        case .closing(.shutdown, _), .stopped:
            throw self.invalid("connect")
        }
    }

    /// The operator asks to drop the current link (if any) and connect again now, without backoff.
    public mutating func reconnectRequested(now: MonotonicInstant) throws(InvalidTransition) -> Action {
        switch self.state {
        case .open(_, let connection):
            return self.close(connection, .reconnect, code: 1000, reason: StatusReport.Close.reconnectReason, now: now)
        case .connecting:
            guard self.networkAvailable else {
                self.enter(.waitingForNetwork, now: now)
                return .abort(.networkLost)
            }
            // A new attempt: a new connection.
            self.set(.connecting(.handshaking, ConnectionContext()))
            return .abortAndConnect(attempt: self.failures + 1)
        case .idle, .backingOff, .waitingForNetwork:
            return try self.connectRequested(now: now)
        case .closing(.user, let connection), .closing(.reconnect, let connection):
            self.set(.closing(.reconnect, connection))
            return .none
        case .closing(.shutdown, _), .stopped:
            throw self.invalid("reconnect")
        }
    }

    /// The upgrade completed: with a ready gate (`upstream.ready_when`) the attempt waits for
    /// the message that makes it ready (`ready`), else the link is open.
    public mutating func upgraded(readyGate: Bool, now: MonotonicInstant) throws(InvalidTransition) -> Action {
        guard case .connecting(.handshaking, let connection) = self.state else { throw self.invalid("upgraded") }
        guard !readyGate else {
            self.set(.connecting(.awaitingReady, connection))
            return .none
        }
        return self.opened(connection, now: now)
    }

    /// The message matching the ready gate came: the link is open.
    public mutating func ready(now: MonotonicInstant) throws(InvalidTransition) -> Action {
        guard case .connecting(.awaitingReady, let connection) = self.state else { throw self.invalid("ready") }
        return self.opened(connection, now: now)
    }

    /// The open link moved to a renewed connection (`upstream.max_lifetime`, `renew_when`): still
    /// open, not a reconnect; `next` is the new connection's own context (its close handshake,
    /// its heartbeat since its upgrade, else from now), and its time open counts from now.
    /// Returns the old connection's, whose close handshake goes on while it closes.
    mutating func renewed(to next: ConnectionContext, now: MonotonicInstant) throws(InvalidTransition) -> ConnectionContext {
        guard case .open(_, let old) = self.state else { throw self.invalid("renewed") }
        var next = next
        if next.heartbeat == nil { next.startHeartbeat(self.settings.heartbeat, now: now) }
        self.set(.open(since: now, next))
        return old
    }

    private mutating func opened(_ connection: ConnectionContext, now: MonotonicInstant) -> Action {
        if self.everOpened { self.reconnects += 1 }
        self.everOpened = true
        var connection = connection
        connection.startHeartbeat(self.settings.heartbeat, now: now)
        self.enter(.open(since: now, connection), now: now)
        return .none
    }

    /// We close the open `connection` for `intent`: the close frame goes unless the server's
    /// came first (then only the TCP end is left).
    private mutating func close(_ connection: ConnectionContext, _ intent: CloseIntent, code: UInt16, reason: String, now: MonotonicInstant) -> Action {
        var connection = connection
        let action = connection.close.close(code: code, reason: reason)
        self.enter(.closing(intent, connection), now: now)
        return Self.action(action)
    }

    /// Changes the current connection's context (nil when there is none: no attempt under way):
    /// the one door to it (LinkStateMachine+Connection.swift), as `enter` is to the state.
    mutating func withConnection<T>(_ body: (inout ConnectionContext) -> T) -> T? {
        // The context is taken out of the state (which holds no second copy of it meanwhile),
        // changed and put back; of the cached readers only `mayWrite` can change with it.
        switch self.state {
        case .connecting(let step, var connection):
            self.state = .idle
            let result = body(&connection)
            self.mayWrite = connection.close.mayWrite
            self.state = .connecting(step, connection)
            return result
        case .open(let since, var connection):
            self.state = .idle
            let result = body(&connection)
            self.mayWrite = connection.close.mayWrite
            self.state = .open(since: since, connection)
            return result
        case .closing(let intent, var connection):
            self.state = .idle
            let result = body(&connection)
            self.mayWrite = connection.close.mayWrite
            self.state = .closing(intent, connection)
            return result
        case .idle, .waitingForNetwork, .backingOff, .stopped:
            return nil
        }
    }

    /// The attempt failed before the link opened (refused, TLS, handshake, timeout).
    public mutating func connectFailed(_ reason: DisconnectReason, now: MonotonicInstant) throws(InvalidTransition) -> Action {
        guard case .connecting = self.state else { throw self.invalid("connectFailed") }
        return self.retry(after: reason, now: now, countsAsFailure: true)
    }

    /// An open (or closing) link ended.
    public mutating func disconnected(_ reason: DisconnectReason, now: MonotonicInstant) throws(InvalidTransition) -> Action {
        switch self.state {
        case .open(let since, _):
            // A link that ended before it was stable counts as a failed attempt, so a server that
            // closes right after every open meets a growing backoff, not a loop of reconnects.
            let stable = now - since >= self.settings.backoff.stableAfter
            if stable { self.failures = 0 }
            self.endedEarly = !stable
            return self.retry(after: reason, now: now, countsAsFailure: !stable)
        case .closing(.user(let code, let reason), _):
            self.endedEarly = false
            self.lastDisconnect = .userClosed(code: code, reason: reason)
            self.enter(.idle, now: now)
            return .none
        case .closing(.reconnect, _):
            // We sent the close: whatever the server answered, the user asked for it.
            self.endedEarly = false
            self.lastDisconnect = .userClosed(code: 1000, reason: StatusReport.Close.reconnectReason)
            return self.attempt(now: now)
        case .closing(.shutdown, _):
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
            self.enter(.connecting(.handshaking, ConnectionContext()), now: now)
            return .connect(attempt: self.failures + 1)
        case (.backingOff, false):
            self.enter(.waitingForNetwork, now: now)
            return .cancelRetry
        case (.backingOff, true) where !wasAvailable:
            self.enter(.connecting(.handshaking, ConnectionContext()), now: now)
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
        case .open(_, let connection):
            return self.close(connection, .user(code: code, reason: reason), code: code, reason: reason, now: now)
        case .closing(.reconnect, let connection):
            self.set(.closing(.user(code: code, reason: reason), connection))
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
        case .idle, .closing(.user, _), .closing(.shutdown, _), .stopped:
            return .none
        }
    }

    /// The daemon is stopping: close with 1001 (going away) if open.
    public mutating func shutdown(now: MonotonicInstant) -> Action {
        switch self.state {
        case .open(_, let connection):
            return self.close(connection, .shutdown, code: 1001, reason: "wsbridged shutting down", now: now)
        case .closing(_, let connection):
            self.set(.closing(.shutdown, connection))
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
