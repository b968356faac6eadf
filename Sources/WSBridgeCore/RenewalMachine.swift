/// A renewal of the link's connection (`upstream.max_lifetime`, `upstream.renew_when`,
/// docs/limits.md) as a machine: when one may start, the second connection's session restored,
/// its takeover, the old connection's end, a failure, and a renewal asked for while the last
/// one's old connection still closes. One renewal at a time. The old connection's close
/// handshake is its own context's (`LinkSupervisor.renewalCloseOld`).
///
/// Pure: no clock, no I/O, no connection. The link holds the two connections and the timers,
/// tells the machine what happened (each input a `mutating func`, the time passed in) and does
/// what it answers (UpstreamLink+Renewal.swift). An input that does not fit the phase changes
/// nothing and says so (`false`, nil or `.ignored`): a late callback of a connection that is gone.
package struct RenewalMachine: Sendable {
    package enum Phase: Equatable, Sendable {
        /// No renewal under way.
        case idle
        /// The second connection opens; `ready` once its session is restored (opening messages,
        /// ready gate, sticky sends): from then on its messages count.
        case opening(ready: Bool)
        /// It took over; the old connection closes until its TCP ends.
        case retiring
    }

    /// The last renewal: when it took over or failed (ms since the epoch), how long its overlap
    /// took, why it started, why it failed.
    package struct Last: Equatable, Sendable {
        package var atMillis: Int64
        package var overlapMs: Int64?
        package var why: String
        package var failure: String?
    }

    package private(set) var phase = Phase.idle
    /// Why the renewal under way (or the last one) started.
    package private(set) var why = ""
    private var startedAt: MonotonicInstant?
    /// The sticky keys sent on the second connection: those registered later go on it when it
    /// takes over.
    package private(set) var sentKeys: Set<String> = []
    /// A renewal asked for while the last one's old connection still closed: why.
    package private(set) var waiting: String?
    /// Renewals done, and given up.
    package private(set) var count = 0
    package private(set) var failed = 0
    package private(set) var last: Last?

    package init() {}

    /// The second connection is open and its session restored.
    package var successorReady: Bool { self.phase == .opening(ready: true) }
    /// The second connection is under way (restored or not).
    package var isOpening: Bool { if case .opening = self.phase { true } else { false } }
    /// `status`'s `underway`: `opening`, `closing` or nil.
    package var underway: String? {
        switch self.phase {
        case .idle: nil
        case .opening: "opening"
        case .retiring: "closing"
        }
    }

    package enum Ask: Equatable, Sendable {
        /// The link is not open, or a renewal is already opening: nothing to do.
        case ignored
        /// The last renewal's old connection still closes: this one starts when it ended
        /// (`oldEnded` returns its why).
        case afterOldEnds
        /// It may start (within `upstream.limits.connect_attempts`: then `start`).
        case mayStart
    }

    /// A renewal is asked for (`why`: the lifetime, a notice, a retry).
    package mutating func ask(why: String, linkOpen: Bool) -> Ask {
        guard linkOpen, !self.isOpening else { return .ignored }
        if case .retiring = self.phase {
            self.waiting = why
            return .afterOldEnds
        }
        return .mayStart
    }

    /// The second connection's attempt starts. False (nothing changed) unless idle.
    package mutating func start(why: String, now: MonotonicInstant) -> Bool {
        guard self.phase == .idle else { return false }
        self.phase = .opening(ready: false)
        self.why = why
        self.startedAt = now
        self.sentKeys = []
        self.waiting = nil
        return true
    }

    /// The second connection's session is restored; `keys`: the sticky keys sent on it.
    package mutating func ready(sent keys: Set<String>) -> Bool {
        guard self.phase == .opening(ready: false) else { return false }
        self.phase = .opening(ready: true)
        self.sentKeys = keys
        return true
    }

    /// Sticky key `key` went on the restored second connection too.
    package mutating func sent(_ key: String) {
        guard self.successorReady else { return }
        self.sentKeys.insert(key)
    }

    /// The restored second connection took over (it delivered, or the old one ended): how long
    /// the overlap took; nil (nothing changed) unless it was restored.
    package mutating func tookOver(now: MonotonicInstant, wallMillis: Int64) -> Duration? {
        guard self.successorReady else { return nil }
        let took = self.startedAt.map { now - $0 } ?? .zero
        self.phase = .retiring
        self.count += 1
        self.last = Last(atMillis: wallMillis, overlapMs: took.nanoseconds / 1_000_000, why: self.why, failure: nil)
        return took
    }

    /// The old connection ended: the renewal is over. Returns why a renewal asked for meanwhile
    /// was asked for (it starts now), if one was.
    package mutating func oldEnded() -> String? {
        guard case .retiring = self.phase else { return nil }
        self.phase = .idle
        defer { self.waiting = nil }
        return self.waiting
    }

    /// The renewal failed before its connection took over (`why`): the old connection stays.
    /// Returns when a lifetime's renewal is tried again: after `retry` (`upstream.renew_timeout`)
    /// when `upstream.max_lifetime` is set (`lifetimeSet`), else never (nil, as for a notice).
    package mutating func failed(_ why: String, wallMillis: Int64, lifetimeSet: Bool, retry: Duration) -> Duration? {
        guard self.isOpening else { return nil }
        self.phase = .idle
        self.failed += 1
        self.last = Last(atMillis: wallMillis, overlapMs: nil, why: self.why, failure: why)
        return lifetimeSet ? retry : nil
    }

    /// The link's connection went (or the daemon stops): the renewal under way, and one
    /// waiting, go with it. The counts and the last renewal stay.
    package mutating func abandon() {
        self.phase = .idle
        self.waiting = nil
        self.sentKeys = []
    }

    /// When a connection upgraded at `upgradedAt` is renewed: `lifetime` less `jitterTaken` (a
    /// random part of `upstream.renew_jitter`, from 0 to it), never sooner than a millisecond on.
    package static func lifetimeEnds(upgradedAt: MonotonicInstant, lifetime: Duration, jitterTaken: Duration) -> MonotonicInstant {
        upgradedAt + .nanoseconds(max(lifetime.nanoseconds - jitterTaken.nanoseconds, 1_000_000))
    }
}
