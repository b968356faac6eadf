extension StatusReport {
    /// `[fleet]` (docs/fleet.md): the messages published into the NATS JetStream stream.
    public struct Fleet: Sendable, Equatable, Codable {
        /// `bridge` (publishes) or `follower` (its upstream is the stream: `received`, `streamSeq`).
        @OmitNil public var role: String? = nil
        /// `fleet.standby`: `leading`, or `standing by for NAME`.
        @OmitNil public var lease: String? = nil
        /// The NATS server connected to now (the client moves among a cluster's).
        @OmitNil public var server: String? = nil
        /// `connecting` (to NATS, or waiting for the stream), `connected` (publishing),
        /// `disconnected` (NATS away: messages wait), `closed`.
        public var state: String
        public var stream: String
        public var subject: String
        /// Messages JetStream acknowledged, and the seq every one up to which it has (or was
        /// given up: `lost`).
        public var acknowledged: Int
        public var acknowledgedThrough: UInt64
        /// Messages numbered and not yet acknowledged (seq received vs acknowledged).
        public var lag: Int
        /// Waiting for their acknowledgement, and not yet published.
        public var inFlight: Int
        public var waiting: Int
        /// Given up: NATS was away past `fleet.max_backlog_bytes`.
        public var lost: Int
        @OmitNil public var lastError: String?
        /// A follower: the messages it took from the stream, and the stream seq of the last.
        @OmitNil public var received: Int? = nil
        @OmitNil public var streamSeq: UInt64? = nil
        /// A follower whose stream has not advanced for 10 s or more: for how many seconds (the
        /// bridge publishes nothing, or the feed is quiet).
        @OmitNil public var stalledSeconds: Int? = nil
        /// A follower: its apps' sends the bridge answered.
        @OmitNil public var forwarded: Int? = nil
        /// A bridge with upstream.protocol: the followers' apps its protocol layer holds.
        @OmitNil public var followerApps: Int? = nil

        public init(
            state: String, stream: String, subject: String, acknowledged: Int, acknowledgedThrough: UInt64, lag: Int, inFlight: Int, waiting: Int,
            lost: Int, lastError: String?
        ) {
            self.state = state
            self.stream = stream
            self.subject = subject
            self.acknowledged = acknowledged
            self.acknowledgedThrough = acknowledgedThrough
            self.lag = lag
            self.inFlight = inFlight
            self.waiting = waiting
            self.lost = lost
            self.lastError = lastError
        }
    }
}
