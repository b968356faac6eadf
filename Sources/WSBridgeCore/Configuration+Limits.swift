extension Configuration.Upstream {
    /// `[upstream.limits]` (docs/limits.md): what the feed allows a connection, kept by the
    /// daemon so that the feed never has to enforce it. Each is off until set.
    public struct Limits: Sendable, Equatable {
        /// Messages the daemon may write on one connection per second (nil: unpaced): apps'
        /// sends, opening messages, sticky re-sends, protocol keepalives.
        public var messagesPerSecond: Double? = nil
        /// How many may go back to back before the rate holds (a new connection starts with
        /// them). 1: never more than `messagesPerSecond` in any second.
        public var burst = 1
        /// WebSocket pings and pongs count against `messagesPerSecond` (Binance counts them).
        public var countPings = false
        /// No more connection attempts than this in any window, across every connection
        /// of the daemon, whatever the backoff would allow.
        public var connectAttempts: AttemptLimit? = nil

        public init() {}

        /// `connect_attempts = "300/5m"`: `limit` attempts in any `window`.
        public struct AttemptLimit: Sendable, Equatable, CustomStringConvertible {
            public var limit: Int
            public var window: Duration
            public init(limit: Int, window: Duration) {
                self.limit = limit
                self.window = window
            }
            public var description: String { "\(self.limit)/\(self.window.short)" }
        }
    }
}
