import NIOCore
import WSBridgeCore

/// Which of `upstream.urls` (the primary, then the fallbacks) the link uses: each failed
/// attempt moves to the next, and an open link on a fallback goes back to the primary after
/// `upstream.failback_after`. Confined to the link's event loop.
final class Failover {
    /// The index in `upstream.urls` of the next attempt's URL.
    private var index = 0
    /// The URL of the current (or last) attempt: what `status` shows while it is live, even
    /// after a reload changed `upstream.url` for the next one.
    private(set) var attemptURL: UpstreamURL?
    /// While open on a fallback: the return to the primary.
    private var failbackTimer: Scheduled<Void>?

    /// Open (or connecting) on a fallback, not the primary.
    var onFallback: Bool { self.index != 0 }

    /// The URL the next attempt uses, recorded as the attempt's.
    func urlForAttempt(in urls: [UpstreamURL]) -> UpstreamURL {
        if self.index >= urls.count { self.index = 0 }
        let url = urls[self.index]
        self.attemptURL = url
        return url
    }

    /// The attempt failed: with fallbacks the next one uses the next URL, which is returned.
    func attemptFailed(urls: [UpstreamURL]) -> UpstreamURL? {
        guard urls.count > 1 else { return nil }
        self.index = (self.index + 1) % urls.count
        return urls[self.index]
    }

    /// A reload changed the list: an index past its end starts again at the primary.
    func update(urls: [UpstreamURL]) {
        if self.index >= urls.count { self.index = 0 }
    }

    /// Replaces the pending return to the primary (nil: none).
    func setFailback(_ timer: Scheduled<Void>?) {
        self.failbackTimer?.cancel()
        self.failbackTimer = timer
    }

    /// The next attempt uses the primary.
    func backToPrimary() {
        self.failbackTimer = nil
        self.index = 0
    }
}

@available(*, unavailable)
extension Failover: Sendable {}
