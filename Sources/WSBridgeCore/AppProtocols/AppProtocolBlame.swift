/// Which subscription a close right after open is laid at: the one sent last on the open link,
/// unless the server answered it (or sent its events) or a call went after it; closes in a row
/// laid at the same subscription are counted, and a clean end of the link forgets the count.
/// One that worked on an earlier connection is never sent to it (the session's `ready`).
struct AppProtocolBlame {
    /// The key of the subscription sent last on the open link (nil: nothing to blame).
    private(set) var lastSent: String?
    /// Closes right after open laid at one subscription, in a row.
    private var strikes: [String: Int] = [:]
    /// What the last such close was laid at, for `status`.
    var culprit: String?

    /// Subscription `key` went upstream (nil: a call, which nothing is laid at).
    mutating func sent(_ key: String?) { self.lastSent = key }

    /// The server answered subscription `key` or sent its events (it did not make the link
    /// close), or it ended.
    mutating func acquit(_ key: String) {
        if self.lastSent == key { self.lastSent = nil }
    }

    /// The link ended. Right after open: the close is laid at the subscription sent last, and
    /// the closes in a row laid at it are returned with its key (nil: nothing was sent to
    /// blame). Otherwise the count starts again.
    mutating func ended(rightAfterOpen: Bool) -> (key: String, count: Int)? {
        defer { self.lastSent = nil }
        guard rightAfterOpen else {
            self.strikes.removeAll()
            return nil
        }
        guard let key = self.lastSent else { return nil }
        let count = self.strikes[key, default: 0] + 1
        self.strikes = [key: count]
        return (key, count)
    }

    /// Subscription `key` was set aside: its count starts again if it is sent again.
    mutating func setAside(_ key: String) { self.strikes[key] = nil }
}
