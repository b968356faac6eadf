extension Configuration {
    /// `[fleet]` (docs/fleet.md): every upstream message published into a NATS JetStream stream,
    /// for the apps of other hosts. Off (no servers) by default: a single host needs no NATS.
    public struct Fleet: Sendable, Equatable {
        /// What this daemon is in the fleet.
        public enum Role: String, Sendable, Equatable, CaseIterable {
            /// Holds the upstream and publishes its messages into the stream.
            case bridge
            /// Its upstream is the stream: its apps get the bridge's messages, and their sends
            /// reach the upstream through the bridge.
            case follower
        }

        public var role = Role.bridge

        /// Bridges that stand by for one another (docs/fleet.md): one at a time leads, by a
        /// lease in a JetStream key-value bucket.
        public enum Standby: String, Sendable, Equatable, CaseIterable {
            /// One bridge: no lease.
            case none
            /// Only the leader connects to the upstream; the others connect when they take over.
            case cold
            /// Every bridge connects and publishes; JetStream drops the duplicates by the id
            /// `upstream.dedupe` takes from each message. The leader answers followers' sends.
            case hot
        }

        public var standby = Standby.none
        /// The key-value bucket of the leases (made if missing), and how long a lease lasts
        /// unrenewed: a leader that stops renewing is followed within about this.
        public var leaseBucket = "wsbridge-leases"
        public var leaseTTL: Duration = .seconds(5)
        /// The NATS servers (`nats://HOST:PORT`, `tls://HOST:PORT`): any one of a cluster will
        /// do, the client learns the others. Empty: no fleet.
        public var servers: [String] = []
        /// Credentials: a user and password, or a token, or a credentials file (`.creds`).
        public var user: String?
        public var password: String?
        public var token: String?
        public var credentials: String?
        /// TLS: the CA that signed the servers' certificates, and a client certificate.
        public var caFile: String?
        public var certFile: String?
        public var keyFile: String?
        /// The JetStream stream the messages go into (made by the operator, docs/fleet.md), and
        /// the subject they are published on (one of the stream's).
        public var stream = "WSBRIDGE"
        public var subject = "wsbridge.messages"
        /// The subject a bridge answers its followers' sends on (NATS request-reply); not one of
        /// the stream's subjects.
        public var requests = "wsbridge-requests.WSBRIDGE"
        /// Messages published and not yet acknowledged by JetStream, at most.
        public var maxInFlight = 1024
        /// Up to this many messages in one message of the stream (docs/fleet.md, "Batches"): a
        /// bridge packs what waits when it publishes, and followers number each message alone.
        /// 1: every message a message of the stream. Not with `standby = "hot"`.
        public var batch = 1
        /// The most a batch holds, in bytes (under NATS's max_payload of 1 MiB).
        public static let batchMaxBytes = 512 << 10
        /// A message JetStream has not acknowledged within this is published again.
        public var ackTimeout: Duration = .seconds(5)
        /// Messages waiting while NATS is away, at most these bytes: past them the oldest are
        /// given up (counted in status).
        public var maxBacklogBytes = 256 << 20
        /// What `wsbridged --fleet-init` makes the stream and the lease bucket with: copies of each
        /// message on this many NATS servers (1, 3 or 5 in a cluster), and how long the stream
        /// remembers a message's id to drop a second copy (at least as long as NATS may be away:
        /// a bridge publishes again what it was not sure of, and hot bridges all publish).
        public var replicas = 1
        public var duplicateWindow: Duration = .seconds(120)
        /// The NATS C client's library, loaded when a fleet is configured.
        public var library = "libnats.so.3.4"
        public init() {}

        /// A fleet is configured.
        public var isOn: Bool { !self.servers.isEmpty }
    }
}
