/// `status`'s parts for a feed's connections: a pool's (`connections`) and renewals (`renewal`).
extension StatusReport {
    /// One connection of a pool: its number (1: the first), state and since when, URL, the
    /// subscriptions on it (their weight, and how many keys), round trip, reconnects, renewals,
    /// the pace's wait, and how its last link ended.
    public struct Connection: Sendable, Equatable, Codable {
        public var connection: Int
        public var state: ConnectionPhase
        public var since: Int64
        public var url: String
        public var subscriptions: Int
        public var keys: Int
        @OmitNil public var rttMs: Double?
        public var reconnects: Int
        public var renewals: Int
        public var messagesIn: UInt64
        public var messagesOut: UInt64
        public var waiting: Int
        @OmitNil public var lastClose: Close?
        /// What the server closed this connection after, right after open, last (nil once it is
        /// stable): the sticky send sent last on it.
        @OmitNil public var culprit: String?

        public init(
            connection: Int, state: ConnectionPhase, since: Int64, url: String, subscriptions: Int, keys: Int, rttMs: Double?, reconnects: Int, renewals: Int,
            messagesIn: UInt64, messagesOut: UInt64, waiting: Int, lastClose: Close?, culprit: String? = nil
        ) {
            self.connection = connection
            self.state = state
            self.since = since
            self.url = url
            self.subscriptions = subscriptions
            self.keys = keys
            self.rttMs = rttMs
            self.reconnects = reconnects
            self.renewals = renewals
            self.messagesIn = messagesIn
            self.messagesOut = messagesOut
            self.waiting = waiting
            self.lastClose = lastClose
            self.culprit = culprit
        }
    }

    /// The connection's renewals (`upstream.max_lifetime`, `upstream.renew_when`, docs/limits.md).
    public struct Renewal: Sendable, Equatable, Codable {
        /// The renewal under way: `opening` (the second connection restores its session),
        /// `closing` (it took over; the old one closes), nil when none is.
        @OmitNil public var underway: String?
        /// When the current connection is renewed, in ms from now (nil: not planned).
        @OmitNil public var inMs: Int64?
        /// Renewals done, and given up (the second connection did not deliver in time).
        public var renewals: Int
        public var failed: Int
        /// Messages dropped as duplicates during overlaps.
        public var duplicatesDropped: Int
        @OmitNil public var last: Last?

        public init(underway: String? = nil, inMs: Int64? = nil, renewals: Int = 0, failed: Int = 0, duplicatesDropped: Int = 0, last: Last? = nil) {
            self.underway = underway
            self.inMs = inMs
            self.renewals = renewals
            self.failed = failed
            self.duplicatesDropped = duplicatesDropped
            self.last = last
        }

        /// The last renewal: when it took over or failed (ms since the Unix epoch), how long
        /// the overlap lasted, why it started, and why it failed.
        public struct Last: Sendable, Equatable, Codable {
            public var at: Int64
            @OmitNil public var overlapMs: Int64?
            public var why: String
            @OmitNil public var failure: String?

            public init(at: Int64, overlapMs: Int64?, why: String, failure: String?) {
                self.at = at
                self.overlapMs = overlapMs
                self.why = why
                self.failure = failure
            }
        }
    }
}
