import WSBridgeProtocol

/// The daemon's typed configuration, as read from `wsbridged.toml` and command-line overrides.
///
/// Every field has the default that `etc/wsbridged.toml` documents; `ConfigurationLoader`
/// fills it from TOML and validates it.
public struct Configuration: Sendable, Equatable {
    public var upstream = Upstream()
    public var auth = Auth()
    public var tls = TLS()
    public var proxy = Proxy()
    public var heartbeat = Heartbeat()
    public var backoff = Backoff()
    public var reachability = Reachability()
    public var local = Local()
    public var queue = Queue()
    public var journal = Journal()
    public var access = Access()
    public var log = Log()
    public var metrics = Metrics()
    public var fleet = Fleet()
    /// `upstream.protocol` and `[protocol]`: the application protocol the daemon owns.
    public var applicationProtocol = ApplicationProtocol()
    /// Every key the file set, as written, with when a change to it takes effect
    /// (ConfigurationKeys.swift): what a reload compares.
    public var fileKeys: [String: FileKey] = [:]

    public init() {}

    /// The application protocol on the link (docs/protocols.md): `raw` passes every message as it
    /// is; with another, the daemon owns the connection's ids, subscriptions and keepalives.
    public struct ApplicationProtocol: Sendable, Equatable {
        public enum Kind: String, Sendable, CaseIterable {
            case raw
            case json
            case jsonrpc
            case graphqlTransportWS = "graphql-transport-ws"
            case socketio
            case stomp
            case nats

            /// The protocol's codec (its file says the rest: its connection and its messages);
            /// nil for `raw`. A new protocol is its codec's file and its case here.
            package var codec: (any AppProtocolCodec.Type)? {
                switch self {
                case .raw: nil
                case .json: JSONProtocol.self
                case .jsonrpc: JSONRPC.self
                case .graphqlTransportWS: GraphQLTransportWS.self
                case .socketio: SocketIO.self
                case .stomp: STOMP.self
                case .nats: NATS.self
                }
            }
        }

        public var kind = Kind.raw
        /// graphql-transport-ws: connection_init's payload, JSON text (placeholders as in
        /// upstream.on_open). nil: none.
        public var initPayload: String? = nil
        /// Calls and subscriptions one app may hold, and all apps together.
        public var maxPerApp = 1000
        public var maxTotal = 10000
        /// Bytes of subscription messages remembered to send again on every open, all together.
        public var maxSubscriptionBytes = 16 << 20
        /// Opens in a row the server closed right after a subscription was sent, before it is set aside.
        public var setAsideAfter = 3
        /// After an open, how long a subscription that never worked may go unconfirmed (no answer,
        /// no event) before the next one goes.
        public var confirmTimeout: Duration = .seconds(1)
        /// json: the id's path in requests and answers.
        public var idPath: String? = nil
        /// json: the upstream messages the daemon answers itself (the feed's own keepalive).
        public var replies: [Reply] = []
        /// socketio: the namespace connected, and the CONNECT packet's auth payload (JSON text,
        /// placeholders as in upstream.on_open).
        public var namespace: String? = nil
        public var auth: String? = nil
        /// stomp: CONNECT's login, passcode (placeholders), virtual host and heart-beat
        /// (milliseconds: the daemon sends every, it wants every).
        public var login: String? = nil
        public var passcode: String? = nil
        public var host: String? = nil
        public var heartBeat: HeartBeat? = nil
        /// nats: CONNECT's user, pass, auth token (placeholders) and connection name.
        public var user: String? = nil
        public var pass: String? = nil
        public var token: String? = nil
        public var clientName: String? = nil

        /// STOMP's heart-beat setting.
        public struct HeartBeat: Sendable, Equatable {
            public var send: Int
            public var receive: Int
            public init(send: Int, receive: Int) {
                self.send = send
                self.receive = receive
            }
        }

        public init() {}

        /// One `[[protocol.reply]]`.
        public struct Reply: Sendable, Equatable {
            public var when: Filter
            public var send: ReplyTemplate

            public init(when: Filter, send: ReplyTemplate) {
                self.when = when
                self.send = send
            }
        }
    }

    public struct Upstream: Sendable, Equatable {
        /// ws:// or wss:// URL of the upstream.
        public var url = UpstreamURL(scheme: .ws, host: "127.0.0.1", port: 8080, path: "/")
        public var headers: [Header] = []
        public var subprotocols: [String] = []
        public var compression = true
        public var maxMessageSize = 16 * 1024 * 1024
        public var connectTimeout: Duration = .seconds(10)
        /// false: start idle, and connect only on a `connect` request.
        public var connectOnStart = true
        /// Tried in turn after the primary `url` fails (each failed attempt moves to the next,
        /// with the same backoff); headers, token and TLS settings apply to each.
        public var fallbackURLs: [UpstreamURL] = []
        /// While on a fallback, go back to the primary after this long (nil: stay until it fails).
        public var failbackAfter: Duration? = nil
        /// Sent first, in order, on every open (docs/sessions.md): a login, a resume.
        public var onOpen: [OpeningMessage] = []
        /// The link counts as open only once an upstream message matches (nil: at the upgrade).
        public var readyWhen: Filter? = nil
        /// How long after the upgrade a message may take to match `readyWhen`.
        public var readyTimeout: Duration = .seconds(10)
        /// `[upstream.limits]`: the feed's rules for a connection. Off by default.
        public var limits = Limits()
        /// A connection is renewed (a second one opened, the first closed once it delivers)
        /// this long after it opened, less up to `renewJitter` (nil: never).
        public var maxLifetime: Duration? = nil
        /// The most taken off `maxLifetime` at random (nil: 1 % of it).
        public var renewJitter: Duration? = nil
        /// An upstream message matching it (a server's notice that it will close) renews the
        /// connection now (nil: none).
        public var renewWhen: Filter? = nil
        /// The longest a renewal's overlap lasts: a new connection that has not delivered by
        /// then is given up (the old one stays, and a renewal is tried again later).
        public var renewTimeout: Duration = .seconds(30)
        /// The paths whose values tell one message from another during a renewal's overlap
        /// (empty: the message's bytes).
        public var dedupe: [String] = []
        /// The most messages of one connection the overlap remembers for `dedupe`.
        public var dedupeWindow = 65_536

        /// A pool: at most this many subscriptions (sticky keys, each weighing 1 or the length
        /// of the array at `subscriptionWeight` in its text) on one connection; the next
        /// connection opens when they are full (nil: one connection carries them all).
        public var subscriptionsPerConnection: Int? = nil
        /// The most connections a pool opens.
        public var connections = 10
        /// A path in a sticky text whose array's length is the subscription's weight (Binance's
        /// `params`: one SUBSCRIBE for several streams); nil: each weighs 1.
        public var subscriptionWeight: String? = nil

        /// The renewal's jitter: `renewJitter`, else 1 % of `maxLifetime`.
        public var effectiveRenewJitter: Duration {
            self.renewJitter ?? (self.maxLifetime.map { .nanoseconds($0.nanoseconds / 100) } ?? .zero)
        }

        /// The primary, then the fallbacks.
        public var urls: [UpstreamURL] { [self.url] + self.fallbackURLs }

        public init() {}

        /// An extra HTTP header for the upgrade request.
        public struct Header: Sendable, Equatable {
            public var name: String
            public var value: String
            public init(name: String, value: String) {
                self.name = name
                self.value = value
            }
        }
    }

    public struct Auth: Sendable, Equatable {
        /// A file holding a bearer token, read at every connect (so rotation works). Never logged.
        public var tokenFile: String? = nil
        public init() {}
    }

    public struct TLS: Sendable, Equatable {
        public var caFile: String? = nil
        public var certFile: String? = nil
        public var keyFile: String? = nil
        public var serverName: String? = nil
        public var insecure = false
        public init() {}
    }

    public struct Proxy: Sendable, Equatable {
        /// `http://host:port` (HTTP CONNECT) or `socks5://host:port`; nil means none configured.
        public var url: ProxyURL? = nil
        /// Honour `https_proxy`/`http_proxy`/`all_proxy`/`no_proxy` when `url` is not set.
        public var useEnvironment = true
        public init() {}
    }

    public struct Heartbeat: Sendable, Equatable {
        public var interval: Duration = .seconds(20)
        public var deadline: Duration = .seconds(10)
        /// Optional application-level heartbeat text sent with every ping.
        public var text: String? = nil
        public init() {}
    }

    public struct Backoff: Sendable, Equatable {
        public var policy = BackoffPolicy()
        /// 0 = retry forever.
        public var maxAttempts = 0
        public init() {}
    }

    public struct Reachability: Sendable, Equatable {
        public var enabled = true
        public var pollInterval: Duration = .seconds(30)
        public init() {}
    }

    public struct Local: Sendable, Equatable {
        public var socket = "/run/wsbridged/wsbridged.sock"
        public var mode: UInt32 = 0o660
        public var group: String? = nil
        /// Longest request line accepted from a client, in bytes.
        public var maxLine = 1 << 20
        /// Messages a subscriber may fall behind before it loses the oldest.
        public var subscriberQueue = 4096
        /// Bytes a subscriber may fall behind before it loses the oldest.
        public var subscriberQueueBytes = 16 << 20
        /// Lines younger than this are kept past `subscriberQueue`, up to `burstMessages` (not
        /// past the bytes): a burst a subscriber reads within it is not lost. Zero: the count
        /// always bounds.
        public var subscriberQueueBurst: Duration = .milliseconds(250)
        /// The most lines a burst keeps: 16 × `subscriberQueue`.
        public var burstMessages: Int { 16 * self.subscriberQueue }
        /// Recent messages kept for `since` resumption.
        public var replay = 1024
        /// Bytes of encoded lines the replay ring may hold (the oldest go first).
        public var replayBytes = 16 << 20
        /// Clients connected at once; one more is told why and closed.
        public var maxClients = 1000
        /// Of `maxClients`, the places kept for root, the daemon's own user and `access.write_*`
        /// (as PostgreSQL keeps connections for superusers): the operator is never locked out.
        /// The loader refuses a value set in the file that is not below `maxClients`.
        public var reservedClients = 4

        /// The places kept for privileged clients: at most `maxClients - 1`, so the default
        /// leaves others a place when `maxClients` is tiny.
        public var reserved: Int { min(self.reservedClients, self.maxClients - 1) }
        /// Unread replies and notices a client may have queued before the daemon stops reading
        /// its requests (resumed when half of it drained). Notices alone past twice this
        /// disconnect it.
        public var clientOutputBytes = 1 << 20
        /// Each client socket's kernel send buffer (SO_SNDBUF, which Linux doubles for its own
        /// bookkeeping and caps at net.core.wmem_max); 0 leaves the system's default
        /// (net.core.wmem_default). A reader that empties its socket while the daemon's loop
        /// is busy with an upstream read waits for data; a larger buffer keeps it reading.
        public var sendBufferBytes = 1 << 20
        /// Every client's send buffer until it reads fast (it read half of `sendBufferBytes`
        /// within half a second), and a lagging client's (one that dropped
        /// messages): fewer old lines wait where they cannot be dropped for newer ones. 0: every
        /// client has `sendBufferBytes`.
        public var laggingSendBufferBytes = 64 << 10
        /// `request`s waiting for their answer, per client and in all.
        public var maxPendingRequests = 64
        public var maxPendingRequestsTotal = 1024
        /// A filter's dotted path: longest in bytes, and most components.
        public var filterMaxBytes = 256
        public var filterMaxDepth = 16
        /// Put a text payload that is JSON inline (`"json": {...}`) instead of as a string.
        public var inlineJSON = false
        /// Sticky keys one client may hold, keys in all, and their bytes in all (key, text and
        /// leave text).
        public var stickyKeysPerClient = 64
        public var stickyKeys = 1024
        public var stickyBytes = 1 << 20
        /// `[local.websocket]`: the WebSocket face (off by default).
        public var webSocket = WebSocket()
        public init() {}
    }

    /// Sends made while the link is not open wait here, flushed in order on reconnect.
    public struct Queue: Sendable, Equatable {
        public var maxMessages = 1000
        public var maxBytes = 16 << 20
        /// The directory of the durable outbound spool (nil: the queue lives in memory only).
        public var spool: String? = nil
        public var fsync = FsyncPolicy.always
        public init() {}
    }

    /// The journal of upstream messages (docs/journal.md): consumers resume from it across
    /// restarts and after longer than the replay ring keeps.
    public struct Journal: Sendable, Equatable {
        /// Its directory (nil: no journal; the replay ring is all there is).
        public var dir: String? = nil
        /// Whole segments go, oldest first, once the journal holds more than this...
        public var maxBytes = 1 << 30
        /// ...or once their last message is older than this.
        public var maxAge: Duration = .seconds(24 * 3600)
        /// A segment file is closed and a new one begun past this size.
        public var segmentBytes = 64 << 20
        /// `always`: every batch written is fdatasync'd at once; `batch`: at most every
        /// `fsyncInterval`, and only after writes.
        public var fsync = FsyncPolicy.batch
        public var fsyncInterval: Duration = .seconds(1)
        /// Messages waiting for the writer (a disk slower than the feed) beyond this are not
        /// journaled (a `not_durable` gap for a consumer who replays them); live delivery
        /// goes on.
        public var bufferBytes = 64 << 20
        public init() {}
    }

    /// When a queued send (or a journaled message) counts as stored.
    public enum FsyncPolicy: String, Sendable, CaseIterable {
        /// Written and fdatasync'd: survives a crash of the machine. Sends arriving together
        /// share one fdatasync.
        case always
        /// Written to the file: survives a crash or kill of the daemon; fdatasync'd within a
        /// second, so a power loss can take the last second of sends.
        case batch
    }

    /// Who may send, close, connect, reconnect and request (others may subscribe and read status).
    /// root and the daemon's own user may always.
    public struct Access: Sendable, Equatable {
        public var writeUIDs: [UInt32] = []
        public var writeGroups: [String] = []
        public init() {}
    }

    /// The optional HTTP endpoint serving `/metrics` (the `metrics` op works without it).
    public struct Metrics: Sendable, Equatable {
        /// Where to listen; nil (the default) serves no HTTP at all.
        public var listen: HostPort?
        /// HTTP connections at once; one more is closed at once.
        public var maxConnections = 16
        public init() {}
    }

    /// `HOST:PORT` or `[IPv6]:PORT`; port 0 picks a free one.
    public struct HostPort: Sendable, Equatable, CustomStringConvertible {
        public var host: String
        public var port: Int

        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }

        public init?(parsing text: String) {
            let host: Substring
            let port: Substring
            if text.hasPrefix("[") {
                guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else { return nil }
                host = text[text.index(after: text.startIndex)..<close]
                port = text[text.index(close, offsetBy: 2)...]
            } else {
                guard let colon = text.lastIndex(of: ":"), !text[..<colon].contains(":") else { return nil }
                host = text[..<colon]
                port = text[text.index(after: colon)...]
            }
            guard !host.isEmpty, let p = Int(port), (0...65535).contains(p) else { return nil }
            self.init(host: String(host), port: p)
        }

        public var description: String { self.host.contains(":") ? "[\(self.host)]:\(self.port)" : "\(self.host):\(self.port)" }
    }

    public struct Log: Sendable, Equatable {
        public var level = LogLevel.info
        public init() {}
    }

    public enum LogLevel: String, Sendable, CaseIterable {
        case trace, debug, info, notice, warning, error, critical
    }
}
