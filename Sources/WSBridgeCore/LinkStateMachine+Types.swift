import WSBridgeProtocol

// The machine's settings, its actions, the transitions it tells and the error of an input
// that cannot happen (LinkStateMachine.swift).
extension LinkStateMachine {
    public struct Settings: Sendable, Equatable {
        public var backoff: BackoffPolicy
        /// 0 = forever.
        public var maxAttempts: Int
        /// Each open connection's heartbeat (nil: none).
        public var heartbeat: Heartbeat?

        public struct Heartbeat: Sendable, Equatable {
            public var interval: Duration
            public var deadline: Duration
            public init(interval: Duration, deadline: Duration) {
                self.interval = interval
                self.deadline = deadline
            }
        }

        public init(backoff: BackoffPolicy = BackoffPolicy(), maxAttempts: Int = 0, heartbeat: Heartbeat? = nil) {
            self.backoff = backoff
            self.maxAttempts = maxAttempts
            self.heartbeat = heartbeat
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

    /// Where a connection attempt is (the phase is `connecting` in both).
    public enum AttemptStep: Sendable, Equatable {
        /// The connector, TCP, TLS and the WebSocket upgrade.
        case handshaking
        /// Upgraded; waiting for the message matching `upstream.ready_when`.
        case awaitingReady
    }
}
