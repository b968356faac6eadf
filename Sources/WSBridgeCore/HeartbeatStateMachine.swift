/// Heartbeat decisions for one open link: when to ping, when the link is dead, and the RTT.
///
/// A ping goes out every `interval`. The link is dead when, after a ping, nothing at all (no
/// pong, no data, no control frame) arrives within `deadline`: inbound traffic counts as
/// liveness, so a busy link never times out falsely. Time is passed in; the driver arms one
/// timer at the instant `next(now:)` returns.
public struct HeartbeatStateMachine: Sendable, Equatable {
    public enum Decision: Sendable, Equatable {
        /// Send a ping with this 8-byte payload now, then call `next(now:)` again.
        case sendPing(payload: UInt64)
        /// Nothing to do until this instant.
        case wait(until: MonotonicInstant)
        /// Nothing arrived for `silence` although a ping was sent `deadline` ago: the link is dead.
        case dead(silence: Duration)
    }

    public var interval: Duration
    public var deadline: Duration

    private var nextPingAt: MonotonicInstant
    /// The earliest ping after which nothing has arrived yet.
    private var unansweredSince: MonotonicInstant?
    private struct Ping: Sendable, Equatable {
        var payload: UInt64
        var sentAt: MonotonicInstant
    }
    private var lastPing: Ping?
    private var lastInbound: MonotonicInstant
    private var counter: UInt64 = 0

    /// The last measured ping → pong round-trip time.
    public private(set) var roundTripTime: Duration?

    /// Starts the heartbeat for a link that opened at `now`.
    public init(interval: Duration, deadline: Duration, now: MonotonicInstant) {
        self.interval = interval
        self.deadline = deadline
        self.nextPingAt = now + interval
        self.lastInbound = now
    }

    /// Any frame arrived: the link is alive.
    public mutating func received(now: MonotonicInstant) {
        self.lastInbound = now
        self.unansweredSince = nil
    }

    /// A pong arrived. Returns the round-trip time when it answers our latest ping.
    @discardableResult
    public mutating func receivedPong(payload: UInt64?, now: MonotonicInstant) -> Duration? {
        self.received(now: now)
        guard let ping = self.lastPing, ping.payload == payload else { return nil }
        let rtt = now - ping.sentAt
        self.roundTripTime = rtt
        self.lastPing = nil
        return rtt
    }

    /// Ping at once (e.g. after a suspend/resume or a network change) and start the deadline.
    public mutating func checkNow(now: MonotonicInstant) {
        self.nextPingAt = now
    }

    /// Applies new settings (SIGHUP) from `now` on.
    public mutating func update(interval: Duration, deadline: Duration, now: MonotonicInstant) {
        self.interval = interval
        self.deadline = deadline
        self.nextPingAt = min(self.nextPingAt, now + interval)
    }

    /// What to do at `now`.
    public mutating func next(now: MonotonicInstant) -> Decision {
        if let since = self.unansweredSince, now >= since + self.deadline {
            return .dead(silence: now - self.lastInbound)
        }
        if now >= self.nextPingAt {
            self.counter &+= 1
            self.lastPing = Ping(payload: self.counter, sentAt: now)
            if self.unansweredSince == nil { self.unansweredSince = now }
            self.nextPingAt = now + self.interval
            return .sendPing(payload: self.counter)
        }
        var wake = self.nextPingAt
        if let since = self.unansweredSince { wake = min(wake, since + self.deadline) }
        return .wait(until: wake)
    }
}
