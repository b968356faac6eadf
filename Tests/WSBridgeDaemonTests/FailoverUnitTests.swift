import Testing
import WSBridgeCore

@testable import WSBridgeDaemon

/// Which URL each attempt uses: the primary, then the fallbacks in turn, and back.
@Suite struct FailoverUnitTests {
    let urls = try! ["ws://a/", "ws://b/", "ws://c/"].map { try UpstreamURL(parsing: $0) }

    @Test func eachFailedAttemptMovesToTheNextURLAndWrapsAround() {
        let f = Failover()
        #expect(f.urlForAttempt(in: self.urls) == self.urls[0])
        #expect(!f.onFallback)
        #expect(f.attemptFailed(urls: self.urls) == self.urls[1])
        #expect(f.urlForAttempt(in: self.urls) == self.urls[1])
        #expect(f.attemptURL == self.urls[1])
        #expect(f.onFallback)
        #expect(f.attemptFailed(urls: self.urls) == self.urls[2])
        #expect(f.attemptFailed(urls: self.urls) == self.urls[0])
        #expect(!f.onFallback)
    }

    @Test func withOneURLThereIsNothingToMoveTo() {
        let f = Failover()
        #expect(f.attemptFailed(urls: [self.urls[0]]) == nil)
        #expect(f.urlForAttempt(in: [self.urls[0]]) == self.urls[0])
    }

    @Test func aShorterListAfterAReloadStartsAgainAtThePrimary() {
        let f = Failover()
        _ = f.attemptFailed(urls: self.urls)
        _ = f.attemptFailed(urls: self.urls)
        f.update(urls: Array(self.urls.prefix(2)))
        #expect(f.urlForAttempt(in: Array(self.urls.prefix(2))) == self.urls[0])
        _ = f.attemptFailed(urls: self.urls)
        f.backToPrimary()
        #expect(f.urlForAttempt(in: self.urls) == self.urls[0])
    }
}
