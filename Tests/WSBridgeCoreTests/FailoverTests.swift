import Testing

@testable import WSBridgeCore

/// Which URL each attempt uses (`Failover`): the primary, then the fallbacks in turn, and back.
@Suite struct FailoverTests {
    let urls = try! ["ws://a/", "ws://b/", "ws://c/"].map { try UpstreamURL(parsing: $0) }

    @Test func eachFailedAttemptMovesToTheNextURLAndWrapsAround() {
        var f = Failover()
        let first = f.urlForAttempt(in: self.urls)
        #expect(first == self.urls[0] && !f.onFallback)
        let next = f.attemptFailed(urls: self.urls)
        let second = f.urlForAttempt(in: self.urls)
        #expect(next == self.urls[1] && second == self.urls[1])
        #expect(f.attemptURL == self.urls[1] && f.onFallback)
        let third = f.attemptFailed(urls: self.urls)
        let wrapped = f.attemptFailed(urls: self.urls)
        #expect(third == self.urls[2] && wrapped == self.urls[0])
        #expect(!f.onFallback)
    }

    @Test func withOneURLThereIsNothingToMoveTo() {
        var f = Failover()
        let next = f.attemptFailed(urls: [self.urls[0]])
        let url = f.urlForAttempt(in: [self.urls[0]])
        #expect(next == nil && url == self.urls[0])
    }

    @Test func aShorterListAfterAReloadStartsAgainAtThePrimary() {
        var f = Failover()
        _ = f.attemptFailed(urls: self.urls)
        _ = f.attemptFailed(urls: self.urls)
        f.update(urls: Array(self.urls.prefix(2)))
        let afterReload = f.urlForAttempt(in: Array(self.urls.prefix(2)))
        #expect(afterReload == self.urls[0])
        _ = f.attemptFailed(urls: self.urls)
        f.backToPrimary()
        let back = f.urlForAttempt(in: self.urls)
        #expect(back == self.urls[0])
    }

    /// The return to the primary is planned when the link opens on a fallback, kept (a renewed
    /// connection goes back when the old one would have), and dropped by a failed attempt or
    /// the return itself; never on the primary.
    @Test func theReturnToThePrimaryIsPlannedOnceTheLinkOpensOnAFallback() {
        var f = Failover()
        let t0 = MonotonicInstant(nanoseconds: 1_000_000_000)
        let onPrimary = f.planFailback(after: .seconds(30), now: t0)
        #expect(onPrimary == nil)
        _ = f.attemptFailed(urls: self.urls)
        let planned = f.planFailback(after: .seconds(30), now: t0)
        #expect(planned == t0 + .seconds(30) && f.failbackAt == planned)
        let unset = f.planFailback(after: nil, now: t0)
        #expect(unset == nil)
        _ = f.planFailback(after: .seconds(30), now: t0)
        _ = f.attemptFailed(urls: self.urls)
        #expect(f.failbackAt == nil)
        _ = f.planFailback(after: .seconds(5), now: t0)
        f.backToPrimary()
        #expect(f.failbackAt == nil && !f.onFallback)
    }
}
