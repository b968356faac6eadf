/// How fast the daemon may write messages on one connection (`upstream.limits`): a token bucket
/// of `burst` messages refilled at `perSecond`, as feeds count them (Binance: 5 a second).
///
/// Pure: time is an input. Credit is kept in nanoseconds (a message costs `interval`), so a
/// long run adds no rounding.
package struct SendPacer: Sendable, Equatable {
    /// What one message costs: the time the bucket takes to refill it.
    package let interval: Duration
    package let burst: Int
    private var credit: Int64
    private var last: MonotonicInstant

    /// A full bucket at `now` (a new connection starts with `burst` messages).
    package init(perSecond: Double, burst: Int, now: MonotonicInstant) {
        precondition(perSecond > 0 && burst >= 1, "a positive rate and a burst of at least one")
        self.interval = .nanoseconds(Int64((1e9 / perSecond).rounded(.up)))
        self.burst = burst
        self.credit = self.interval.nanoseconds * Int64(burst)
        self.last = now
    }

    /// Takes one message's worth if there is one at `now`.
    package mutating func take(now: MonotonicInstant) -> Bool {
        self.refill(now)
        guard self.credit >= self.interval.nanoseconds else { return false }
        self.credit -= self.interval.nanoseconds
        return true
    }

    /// When the next message may go (now, if one may).
    package mutating func next(now: MonotonicInstant) -> MonotonicInstant {
        self.refill(now)
        let missing = self.interval.nanoseconds - self.credit
        return missing <= 0 ? now : now + .nanoseconds(missing)
    }

    private mutating func refill(_ now: MonotonicInstant) {
        guard now > self.last else { return }
        let capacity = self.interval.nanoseconds * Int64(self.burst)
        self.credit = min(capacity, self.credit + (now - self.last).nanoseconds)
        self.last = now
    }
}

/// No more than `limit` connection attempts in any `window` (`upstream.limits.connect_attempts`,
/// "300/5m"), across every connection of the daemon: a sliding log of the last `limit` attempts.
package struct AttemptWindow: Sendable, Equatable {
    package let limit: Int
    package let window: Duration
    /// The instants of the attempts still inside the window, oldest first (at most `limit`).
    private var attempts: [MonotonicInstant] = []

    package init(limit: Int, window: Duration) {
        precondition(limit >= 1 && window > .zero, "at least one attempt in a positive window")
        self.limit = limit
        self.window = window
    }

    /// When the next attempt may start: now, or when the oldest in the window leaves it.
    package mutating func next(now: MonotonicInstant) -> MonotonicInstant {
        self.expire(now)
        guard self.attempts.count >= self.limit, let oldest = self.attempts.first else { return now }
        return oldest + self.window
    }

    /// An attempt starts at `now`; false (and nothing counted) when the window is full.
    package mutating func admit(now: MonotonicInstant) -> Bool {
        guard self.next(now: now) <= now else { return false }
        self.attempts.append(now)
        return true
    }

    /// Attempts in the window at `now`.
    package mutating func count(now: MonotonicInstant) -> Int {
        self.expire(now)
        return self.attempts.count
    }

    private mutating func expire(_ now: MonotonicInstant) {
        let cutoff = self.attempts.firstIndex { now - $0 < self.window } ?? self.attempts.endIndex
        self.attempts.removeFirst(cutoff)
    }
}
