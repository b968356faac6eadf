/// Which subscription a close right after open is laid at: the one sent last on the open link,
/// unless the server answered it (or sent its events) or a call went after it, and never one the
/// server answered or fed on an earlier connection (it worked before: what came after it is to
/// blame); closes in a row laid at the same subscription are counted, and a clean end of the link
/// forgets the count.
struct AppProtocolBlame {
    /// The key of the subscription sent last on the open link (nil: nothing to blame).
    private(set) var lastSent: String?
    /// Closes right after open laid at one subscription, in a row.
    private var strikes: [String: Int] = [:]
    /// What the last such close was laid at, for `status`.
    var culprit: String?
    /// The subscriptions the server answered or fed, on this connection or an earlier one.
    private var confirmed: Set<String> = []

    /// Subscription `key` went upstream (nil: a call, which nothing is laid at). One that
    /// worked before takes no blame from the one sent before it.
    mutating func sent(_ key: String?) {
        if let key, self.confirmed.contains(key) { return }
        self.lastSent = key
    }

    /// The server answered subscription `key` or sent its events: it did not make the link close.
    mutating func acquit(_ key: String) {
        self.confirmed.insert(key)
        if self.lastSent == key { self.lastSent = nil }
    }

    /// Whether the server answered or fed subscription `key` on some connection.
    func isConfirmed(_ key: String) -> Bool { self.confirmed.contains(key) }

    /// Subscription `key` ended.
    mutating func removed(_ key: String) {
        self.confirmed.remove(key)
        self.strikes[key] = nil
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
