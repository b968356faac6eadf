import NIOCore

/// A client's turn at the event loop: at most `linesPerTurn` requests are handled before its
/// reading pauses briefly, so the upstream and the other clients are served in between (a
/// flood of requests costs its sender the wait). A client that sends a few requests now and
/// then never waits: a turn is also over when a socket read is.
struct RequestPacing {
    static let linesPerTurn = 128
    /// How long a client whose turn ran out waits. A timer, not a task: NIO runs every queued
    /// task before it polls again, so only a timer lets the other clients' I/O go first.
    static let pause: TimeAmount = .microseconds(100)

    private var handledInTurn = 0
    /// The turn ran out and the pause has not ended.
    private(set) var paused = false

    /// A request was handled. True when this one ended the turn: start the pause.
    mutating func handled() -> Bool {
        self.handledInTurn += 1
        guard self.handledInTurn >= Self.linesPerTurn, !self.paused else { return false }
        self.paused = true
        return true
    }

    /// A socket read was handled: the next read is a new turn (unless paused).
    mutating func readComplete() {
        if !self.paused { self.handledInTurn = 0 }
    }

    /// The pause is over: a new turn.
    mutating func pauseEnded() {
        self.paused = false
        self.handledInTurn = 0
    }
}
