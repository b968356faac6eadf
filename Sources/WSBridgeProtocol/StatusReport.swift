/// `status`: the link, its counters, the send queue and the local plane.
package struct StatusReport: Sendable, Equatable, Codable {
    package struct Queue: Sendable, Equatable, Codable {
        package var messages: Int
        package var bytes: Int
        package var maxMessages: Int
        package var maxBytes: Int
        /// The durable spool, when `queue.spool` is set.
        package var spool: Spool?

        package init(messages: Int, bytes: Int, maxMessages: Int, maxBytes: Int, spool: Spool? = nil) {
            self.messages = messages
            self.bytes = bytes
            self.maxMessages = maxMessages
            self.maxBytes = maxBytes
            self.spool = spool
        }
    }

    package struct Spool: Sendable, Equatable, Codable {
        package var directory: String
        package var fsync: String
        /// The spool file's size now.
        package var fileBytes: Int
        /// fdatasyncs since the daemon started.
        package var fsyncs: UInt64

        package init(directory: String, fsync: String, fileBytes: Int, fsyncs: UInt64) {
            self.directory = directory
            self.fsync = fsync
            self.fileBytes = fileBytes
            self.fsyncs = fsyncs
        }
    }

    /// The journal of upstream messages (docs/journal.md), when `journal.dir` is set.
    package struct Journal: Sendable, Equatable, Codable {
        package var dir: String
        package var fsync: String
        /// `writing`, or `stopped` (a write failed: `stoppedReason` says why).
        package var state: String
        package var stoppedReason: String?
        package var bytes: Int
        package var segments: Int
        /// The oldest and newest seq kept, and their receive times (ms since the Unix epoch).
        package var oldestSeq: UInt64?
        package var newestSeq: UInt64?
        package var oldestTs: Int64?
        package var newestTs: Int64?
        /// fdatasyncs since the daemon started.
        package var fsyncs: UInt64
        /// Messages never written since the daemon started (its writer behind by
        /// `journal.buffer_bytes`, or stopped).
        package var notJournaled: UInt64
        /// Consumers reading from it now.
        package var replaying: Int

        package init(
            dir: String, fsync: String, state: String, stoppedReason: String?, bytes: Int, segments: Int, oldestSeq: UInt64?, newestSeq: UInt64?,
            oldestTs: Int64?, newestTs: Int64?, fsyncs: UInt64, notJournaled: UInt64, replaying: Int
        ) {
            self.dir = dir
            self.fsync = fsync
            self.state = state
            self.stoppedReason = stoppedReason
            self.bytes = bytes
            self.segments = segments
            self.oldestSeq = oldestSeq
            self.newestSeq = newestSeq
            self.oldestTs = oldestTs
            self.newestTs = newestTs
            self.fsyncs = fsyncs
            self.notJournaled = notJournaled
            self.replaying = replaying
        }
    }

    /// The session the daemon restores on every open (docs/sessions.md).
    package struct Session: Sendable, Equatable, Codable {
        /// `upstream.on_open`: how many opening messages go first on every open.
        package var openingMessages: Int
        /// `upstream.ready_when` as `FIELD=VALUE`, when set.
        package var readyWhen: String?
        /// `waiting` while the link is up and no message matched `ready_when` yet, else `ready`
        /// (the link is open) or `down`.
        package var ready: String
        package var stickyKeys: Int
        package var stickyBytes: Int
        /// The last message the session sent before the server closed the link right after open
        /// (sooner than backoff.stable_after), and who registered it; nil once a link is stable.
        @OmitNil package var culprit: String?

        package init(openingMessages: Int, readyWhen: String?, ready: String, stickyKeys: Int, stickyBytes: Int, culprit: String? = nil) {
            self.openingMessages = openingMessages
            self.readyWhen = readyWhen
            self.ready = ready
            self.stickyKeys = stickyKeys
            self.stickyBytes = stickyBytes
            self.culprit = culprit
        }
    }

    /// The application protocol the daemon owns (docs/protocols.md).
    package struct ApplicationProtocol: Sendable, Equatable, Codable {
        package var name: String
        /// The live upstream subscriptions, oldest first.
        package var subscriptions: [Subscription]
        /// What the server closed the link after, right after open, last: the message and its holders.
        @OmitNil package var culprit: String?
        /// The server's last error report (STOMP ERROR, NATS -ERR, Socket.IO 41/44) and when
        /// (milliseconds since the epoch).
        @OmitNil package var serverError: String?
        @OmitNil package var serverErrorAt: Int64?

        package struct Subscription: Sendable, Equatable, Codable {
            /// The id it has on the wire now.
            package var upstreamId: String
            /// What makes two apps' subscriptions the same one.
            package var key: String
            package var holders: [Holder]
            /// When its first holder subscribed (milliseconds since the epoch).
            package var since: Int64
            /// Why it is set aside (not sent again until `clear_set_aside`), if it is.
            @OmitNil package var setAside: String?

            package init(upstreamId: String, key: String, holders: [Holder], since: Int64 = 0, setAside: String? = nil) {
                self.upstreamId = upstreamId
                self.key = key
                self.holders = holders
                self.since = since
                self.setAside = setAside
            }
        }

        /// An app holding a subscription: its connection, process and user, and its own id for it.
        package struct Holder: Sendable, Equatable, Codable {
            package var client: Int
            @OmitNil package var pid: Int32?
            @OmitNil package var uid: UInt32?
            package var id: String

            package init(client: Int, pid: Int32?, uid: UInt32?, id: String) {
                self.client = client
                self.pid = pid
                self.uid = uid
                self.id = id
            }
        }

        package init(name: String, subscriptions: [Subscription], culprit: String? = nil, serverError: String? = nil, serverErrorAt: Int64? = nil) {
            self.name = name
            self.subscriptions = subscriptions
            self.culprit = culprit
            self.serverError = serverError
            self.serverErrorAt = serverErrorAt
        }
    }

    package struct Close: Sendable, Equatable, Codable {
        /// Who ended a link, as `status` spells it. A string on the wire: a CLI reads a closer a
        /// newer daemon adds as it is.
        package struct Closer: RawRepresentable, Sendable, Equatable, Codable, CustomStringConvertible {
            package var rawValue: String
            package init(rawValue: String) { self.rawValue = rawValue }
            package var description: String { self.rawValue }

            /// The server's close frame, or the server ending the connection.
            package static let server = Closer(rawValue: "server")
            /// An operator's `close` or `reconnect`.
            package static let user = Closer(rawValue: "user")
            /// The daemon stopping.
            package static let daemon = Closer(rawValue: "daemon")
            /// An error: the connection, the heartbeat, the network.
            package static let error = Closer(rawValue: "error")
        }

        package var code: UInt16?
        package var reason: String
        package var by: Closer

        package init(code: UInt16?, reason: String, by: Closer) {
            self.code = code
            self.reason = reason
            self.by = by
        }

        /// The reason of an operator's `reconnect` (by `user`, code 1000): its close, not a `close`.
        package static let reconnectReason = "reconnect requested"
    }

    // The fields in the order a reply lists them; each key is its name in snake_case. A new
    // field is a stored property here (with the value an older daemon's reply reads as) and
    // its row in wsbridgectl's status table.
    package var state: ConnectionPhase = .idle
    /// When the link entered `state`, ms since the Unix epoch.
    package var since: Int64 = 0
    package var url = ""
    package var reconnects = 0
    package var failedAttempts = 0
    package var rttMs: Double?
    package var subprotocol: String?
    package var compression = false
    package var messagesIn: UInt64 = 0
    package var bytesIn: UInt64 = 0
    package var messagesOut: UInt64 = 0
    package var bytesOut: UInt64 = 0
    package var subscribers = 0
    package var clients = 0
    package var seq: UInt64 = 0
    /// The stream `seq` counts in: new whenever seq starts again (a daemon restart).
    package var stream = ""
    package var drops: UInt64 = 0
    package var queue = Queue(messages: 0, bytes: 0, maxMessages: 0, maxBytes: 0)
    /// nil when `journal.dir` is not set.
    @OmitNil package var journal: Journal?
    package var session: Session?
    /// `upstream.protocol` and its live subscriptions; nil for `raw`.
    @OmitNil package var `protocol`: ApplicationProtocol?
    package var lastError: String?
    /// Why the last attempt failed: `error`, or `not_ready` (no message matched
    /// `upstream.ready_when` within `upstream.ready_timeout`).
    package var lastErrorReason: String?
    package var version = WSBridgeVersion.current
    /// The git commit the daemon was built from, when it was built from a checkout.
    @OmitNil package var commit: String? = WSBridgeVersion.commit
    package var lastClose: Close?
    @OmitNil package var retryInMs: Int64?

    package init() {}

    package var json: JSONValue { WireCoding.encode(self) }

    /// Reads a status result; fields a daemon did not send read as zero or absent.
    package init(json: JSONValue) throws(WireDecodingError) {
        self = try WireCoding.decode(Self.self, from: json)
    }
}
