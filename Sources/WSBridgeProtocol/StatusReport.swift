/// `status`: the link, its counters, the send queue and the local plane.
public struct StatusReport: Sendable, Equatable, JSONValueCodable {
    public struct Queue: Sendable, Equatable, Codable {
        public var messages: Int
        public var bytes: Int
        public var maxMessages: Int
        public var maxBytes: Int
        /// The durable spool, when `queue.spool` is set.
        public var spool: Spool?

        public init(messages: Int, bytes: Int, maxMessages: Int, maxBytes: Int, spool: Spool? = nil) {
            self.messages = messages
            self.bytes = bytes
            self.maxMessages = maxMessages
            self.maxBytes = maxBytes
            self.spool = spool
        }
    }

    public struct Spool: Sendable, Equatable, Codable {
        public var directory: String
        public var fsync: String
        /// The spool file's size now.
        public var fileBytes: Int
        /// fdatasyncs since the daemon started.
        public var fsyncs: UInt64

        public init(directory: String, fsync: String, fileBytes: Int, fsyncs: UInt64) {
            self.directory = directory
            self.fsync = fsync
            self.fileBytes = fileBytes
            self.fsyncs = fsyncs
        }
    }

    /// The journal of upstream messages (docs/journal.md), when `journal.dir` is set.
    public struct Journal: Sendable, Equatable, Codable {
        public var dir: String
        public var fsync: String
        /// `writing`, or `stopped` (a write failed: `stoppedReason` says why).
        public var state: String
        public var stoppedReason: String?
        public var bytes: Int
        public var segments: Int
        /// The oldest and newest seq kept, and their receive times (ms since the Unix epoch).
        public var oldestSeq: UInt64?
        public var newestSeq: UInt64?
        public var oldestTs: Int64?
        public var newestTs: Int64?
        /// fdatasyncs since the daemon started.
        public var fsyncs: UInt64
        /// Messages never written since the daemon started (its writer behind by
        /// `journal.buffer_bytes`, or stopped).
        public var notJournaled: UInt64
        /// Consumers reading from it now.
        public var replaying: Int
        /// How this run began: `continued` (the last run stopped cleanly: its stream goes on),
        /// `after_crash` (it did not: a new stream, and resuming consumers get a `not_durable`
        /// gap), or `new` (nothing journaled before).
        public var opened: String

        public init(
            dir: String, fsync: String, state: String, stoppedReason: String?, bytes: Int, segments: Int, oldestSeq: UInt64?, newestSeq: UInt64?,
            oldestTs: Int64?, newestTs: Int64?, fsyncs: UInt64, notJournaled: UInt64, replaying: Int, opened: String = "new"
        ) {
            self.opened = opened
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
    public struct Session: Sendable, Equatable, Codable {
        /// `upstream.on_open`: how many opening messages go first on every open.
        public var openingMessages: Int
        /// `upstream.ready_when` as `FIELD=VALUE`, when set.
        public var readyWhen: String?
        /// `waiting` while the link is up and no message matched `ready_when` yet, else `ready`
        /// (the link is open) or `down`.
        public var ready: String
        public var stickyKeys: Int
        public var stickyBytes: Int
        /// The last message the session sent before the server closed the link right after open
        /// (sooner than backoff.stable_after), and who registered it; nil once a link is stable.
        @OmitNil public var culprit: String?

        public init(openingMessages: Int, readyWhen: String?, ready: String, stickyKeys: Int, stickyBytes: Int, culprit: String? = nil) {
            self.openingMessages = openingMessages
            self.readyWhen = readyWhen
            self.ready = ready
            self.stickyKeys = stickyKeys
            self.stickyBytes = stickyBytes
            self.culprit = culprit
        }
    }

    /// The application protocol the daemon owns (docs/protocols.md).
    public struct ApplicationProtocol: Sendable, Equatable, Codable {
        public var name: String
        /// The live upstream subscriptions, oldest first.
        public var subscriptions: [Subscription]
        /// What the server closed the link after, right after open, last: the message and its holders.
        @OmitNil public var culprit: String?
        /// The server's last error report (STOMP ERROR, NATS -ERR, Socket.IO 41/44) and when
        /// (milliseconds since the epoch).
        @OmitNil public var serverError: String?
        @OmitNil public var serverErrorAt: Int64?

        public struct Subscription: Sendable, Equatable, Codable {
            /// The id it has on the wire now.
            public var upstreamId: String
            /// What makes two apps' subscriptions the same one.
            public var key: String
            public var holders: [Holder]
            /// When its first holder subscribed (milliseconds since the epoch).
            public var since: Int64
            /// Why it is set aside (not sent again until `clear_set_aside`), if it is.
            @OmitNil public var setAside: String?
            /// With a pool (`upstream.subscriptions_per_connection`): the connection it is on, from 1.
            @OmitNil public var connection: Int?

            public init(upstreamId: String, key: String, holders: [Holder], since: Int64 = 0, setAside: String? = nil, connection: Int? = nil) {
                self.upstreamId = upstreamId
                self.key = key
                self.holders = holders
                self.since = since
                self.setAside = setAside
                self.connection = connection
            }
        }

        /// An app holding a subscription: its connection, process and user, and its own id for it.
        public struct Holder: Sendable, Equatable, Codable {
            public var client: Int
            @OmitNil public var pid: Int32?
            @OmitNil public var uid: UInt32?
            public var id: String

            public init(client: Int, pid: Int32?, uid: UInt32?, id: String) {
                self.client = client
                self.pid = pid
                self.uid = uid
                self.id = id
            }
        }

        public init(name: String, subscriptions: [Subscription], culprit: String? = nil, serverError: String? = nil, serverErrorAt: Int64? = nil) {
            self.name = name
            self.subscriptions = subscriptions
            self.culprit = culprit
            self.serverError = serverError
            self.serverErrorAt = serverErrorAt
        }
    }

    /// `[upstream.limits]` as the link keeps them (docs/limits.md): the pace of its writes and
    /// the rule on connection attempts; nil when none is set.
    public struct Limits: Sendable, Equatable, Codable {
        /// `messages_per_second` (nil: unpaced), its `burst`, and whether pings and pongs count.
        @OmitNil public var messagesPerSecond: Double?
        @OmitNil public var burst: Int?
        public var countPings: Bool
        /// The daemon's own messages (opening, sticky, keepalive, pings) waiting for the pace
        /// now; apps' sends wait in `queue`.
        public var waiting: Int
        /// How long messages have waited for the pace, in ms (nil: none waits).
        @OmitNil public var waitMs: Int64?
        /// Messages written after waiting for the pace, since the daemon started.
        public var paced: UInt64
        /// `connect_attempts` ("300/5m"), the attempts in its window now, and how long the next
        /// attempt still waits for room in it (ms; nil: none waits).
        @OmitNil public var connectAttempts: String?
        @OmitNil public var attemptsInWindow: Int?
        @OmitNil public var connectWaitMs: Int64?

        public init(
            messagesPerSecond: Double? = nil, burst: Int? = nil, countPings: Bool = false, waiting: Int = 0, waitMs: Int64? = nil, paced: UInt64 = 0,
            connectAttempts: String? = nil, attemptsInWindow: Int? = nil, connectWaitMs: Int64? = nil
        ) {
            self.messagesPerSecond = messagesPerSecond
            self.burst = burst
            self.countPings = countPings
            self.waiting = waiting
            self.waitMs = waitMs
            self.paced = paced
            self.connectAttempts = connectAttempts
            self.attemptsInWindow = attemptsInWindow
            self.connectWaitMs = connectWaitMs
        }
    }

    /// The last reload (SIGHUP, `systemctl reload`): when, whether it applied, what waits.
    public struct Reload: Sendable, Equatable, Codable {
        /// When it ended, ms since the Unix epoch.
        public var at: Int64
        /// Why the file was refused (the running configuration is kept); nil when it applied.
        @OmitNil public var error: String?
        /// Changed settings that apply only after a restart.
        public var restartNeeded: [String]
        /// Changed settings used from the next connection (`wsbridgectl reconnect` applies them now).
        public var nextConnection: [String]

        public init(at: Int64, error: String? = nil, restartNeeded: [String] = [], nextConnection: [String] = []) {
            self.at = at
            self.error = error
            self.restartNeeded = restartNeeded
            self.nextConnection = nextConnection
        }
    }

    /// What the link has carried, messages and bytes each way: the link keeps this part as its
    /// counters, and `status` and the metrics read it. A new counter is a property here.
    public struct Traffic: Sendable, Equatable, Codable {
        public var messagesIn: UInt64 = 0
        public var bytesIn: UInt64 = 0
        public var messagesOut: UInt64 = 0
        public var bytesOut: UInt64 = 0

        public init() {}

        @inlinable public mutating func received(bytes: Int) {
            self.messagesIn &+= 1
            self.bytesIn &+= UInt64(bytes)
        }

        @inlinable public mutating func sent(bytes: Int) {
            self.messagesOut &+= 1
            self.bytesOut &+= UInt64(bytes)
        }
    }

    /// What the service reports of itself: the local plane keeps this part as it is and sets
    /// each figure where it changes. A new figure of the service is a property here.
    /// The WebSocket face: where it listens, its apps, and the connections not upgraded yet.
    public struct WebSocketFace: Sendable, Equatable, Codable {
        @OmitNil public var listen: String?
        @OmitNil public var socket: String?
        public var apps: Int
        public var connections: Int

        public init(listen: String?, socket: String?, apps: Int, connections: Int) {
            self.listen = listen
            self.socket = socket
            self.apps = apps
            self.connections = connections
        }
    }

    public struct Service: Sendable, Equatable, Codable {
        /// nil until the first reload.
        @OmitNil public var lastReload: Reload?
        /// The HTTP metrics endpoint (`metrics.listen`, its port as bound): nil when there is none.
        @OmitNil public var metricsUrl: String?

        public init() {}
    }

    public struct Close: Sendable, Equatable, Codable {
        /// Who ended a link, as `status` spells it. A string on the wire: a CLI reads a closer a
        /// newer daemon adds as it is.
        public struct Closer: RawRepresentable, Sendable, Equatable, Codable, CustomStringConvertible {
            public var rawValue: String
            public init(rawValue: String) { self.rawValue = rawValue }
            public var description: String { self.rawValue }

            /// The server's close frame, or the server ending the connection.
            public static let server = Closer(rawValue: "server")
            /// An operator's `close` or `reconnect`.
            public static let user = Closer(rawValue: "user")
            /// The daemon stopping.
            public static let daemon = Closer(rawValue: "daemon")
            /// An error: the connection, the heartbeat, the network.
            public static let error = Closer(rawValue: "error")
        }

        public var code: UInt16?
        public var reason: String
        public var by: Closer

        public init(code: UInt16?, reason: String, by: Closer) {
            self.code = code
            self.reason = reason
            self.by = by
        }

        /// The reason of an operator's `reconnect` (by `user`, code 1000): its close, not a `close`.
        public static let reconnectReason = "reconnect requested"
    }

    // The fields in the order a reply lists them; each key is its name in snake_case. A new
    // field is a stored property here (with the value an older daemon's reply reads as) and
    // the line where its owner fills it in; a figure kept only to be reported is a property of
    // the part its owner keeps (`Traffic`, `Service`), which is one place. wsbridgectl's status
    // table shows a field it has no row for as it is; a row is only to word it.
    public var state: ConnectionPhase = .idle
    /// When the link entered `state`, ms since the Unix epoch.
    public var since: Int64 = 0
    public var url = ""
    public var reconnects = 0
    public var failedAttempts = 0
    public var rttMs: Double?
    public var subprotocol: String?
    public var compression = false
    @Flattened public var traffic = Traffic()
    public var subscribers = 0
    public var clients = 0
    /// Clients refused at `local.max_clients` (or its reserved places) since the daemon started.
    public var refusedClients: UInt64 = 0
    /// Why the socket accepts no client now (out of file descriptors); nil while it does.
    @OmitNil public var notAccepting: String?
    public var seq: UInt64 = 0
    /// The stream `seq` counts in: new whenever seq starts again (a daemon restart).
    public var stream = ""
    public var drops: UInt64 = 0
    public var queue = Queue(messages: 0, bytes: 0, maxMessages: 0, maxBytes: 0)
    /// nil when `[upstream.limits]` sets nothing.
    @OmitNil public var limits: Limits?
    /// With a pool (`upstream.subscriptions_per_connection`): each connection; nil without one
    /// (the top-level fields are then the one connection's; with one, the first's).
    @OmitNil public var connections: [Connection]?
    /// nil when neither `upstream.max_lifetime` nor `upstream.renew_when` is set.
    @OmitNil public var renewal: Renewal?
    /// nil when `journal.dir` is not set.
    @OmitNil public var journal: Journal?
    /// nil when `[fleet]` is not set.
    @OmitNil public var fleet: Fleet?
    /// nil when `[local.websocket]` is not set.
    @OmitNil public var websocket: WebSocketFace?
    public var session: Session?
    /// `upstream.protocol` and its live subscriptions; nil for `raw`.
    @OmitNil public var `protocol`: ApplicationProtocol?
    public var lastError: String?
    /// Why the last attempt failed: `error`, or `not_ready` (no message matched
    /// `upstream.ready_when` within `upstream.ready_timeout`).
    public var lastErrorReason: String?
    public var version = WSBridgeVersion.current
    /// The git commit the daemon was built from, when it was built from a checkout.
    @OmitNil public var commit: String? = WSBridgeVersion.commit
    public var lastClose: Close?
    @OmitNil public var retryInMs: Int64?
    @Flattened public var service = Service()

    public init() {}

}
