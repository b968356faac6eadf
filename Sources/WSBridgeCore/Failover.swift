/// Which of `upstream.urls` (the primary, then the fallbacks) the link uses: each failed
/// attempt moves to the next, and an open link on a fallback goes back to the primary after
/// `upstream.failback_after`, counted from when it opened there (a renewal of the connection
/// does not count it again; the link's timer calls `backToPrimary`). Pure: no clock, no I/O.
package struct Failover: Sendable {
    /// The index in `upstream.urls` of the next attempt's URL.
    private var index = 0
    /// The URL of the current (or last) attempt: what `status` shows while it is live, even
    /// after a reload changed `upstream.url` for the next one.
    package private(set) var attemptURL: UpstreamURL?
    /// Open on a fallback: when the link goes back to the primary (nil: not planned).
    package private(set) var failbackAt: MonotonicInstant?

    package init() {}

    /// Open (or connecting) on a fallback, not the primary.
    package var onFallback: Bool { self.index != 0 }

    /// The URL the next attempt uses, recorded as the attempt's.
    package mutating func urlForAttempt(in urls: [UpstreamURL]) -> UpstreamURL {
        if self.index >= urls.count { self.index = 0 }
        let url = urls[self.index]
        self.attemptURL = url
        return url
    }

    /// The attempt failed: with fallbacks the next one uses the next URL, which is returned.
    package mutating func attemptFailed(urls: [UpstreamURL]) -> UpstreamURL? {
        self.failbackAt = nil
        guard urls.count > 1 else { return nil }
        self.index = (self.index + 1) % urls.count
        return urls[self.index]
    }

    /// A reload changed the list: an index past its end starts again at the primary.
    package mutating func update(urls: [UpstreamURL]) {
        if self.index >= urls.count { self.index = 0 }
    }

    /// The link opened (or a reload changed `upstream.failback_after`, `after`): on a fallback
    /// with `after` set, it goes back to the primary then, returned.
    package mutating func planFailback(after: Duration?, now: MonotonicInstant) -> MonotonicInstant? {
        self.failbackAt = self.onFallback ? after.map { now + $0 } : nil
        return self.failbackAt
    }

    /// The next attempt uses the primary.
    package mutating func backToPrimary() {
        self.index = 0
        self.failbackAt = nil
    }
}
