import WSBridgeProtocol

/// The daemon's typed configuration, as read from `wsbridged.toml` and command-line overrides.
///
/// Every field has the default that `etc/wsbridged.toml` documents; `ConfigurationLoader`
/// fills it from TOML and validates it.
package struct Configuration: Sendable, Equatable {
    package var upstream = Upstream()
    package var auth = Auth()
    package var tls = TLS()
    package var proxy = Proxy()
    package var heartbeat = Heartbeat()
    package var backoff = Backoff()
    package var reachability = Reachability()
    package var local = Local()
    package var queue = Queue()
    package var journal = Journal()
    package var access = Access()
    package var log = Log()
    package var metrics = Metrics()
    /// `upstream.protocol` and `[protocol]`: the application protocol the daemon owns.
    package var applicationProtocol = ApplicationProtocol()

    package init() {}

    /// The application protocol on the link (docs/protocols.md): `raw` passes every message as it
    /// is; with another, the daemon owns the connection's ids, subscriptions and keepalives.
    package struct ApplicationProtocol: Sendable, Equatable {
        package enum Kind: String, Sendable, CaseIterable {
            case raw
            case json
            case jsonrpc
            case graphqlTransportWS = "graphql-transport-ws"
            case socketio
            case stomp
            case nats
        }

        package var kind = Kind.raw
        /// graphql-transport-ws: connection_init's payload, JSON text (placeholders as in
        /// upstream.on_open). nil: none.
        package var initPayload: String? = nil
        /// Calls and subscriptions one app may hold, and all apps together.
        package var maxPerApp = 1000
        package var maxTotal = 10000
        /// Bytes of subscription messages remembered to send again on every open, all together.
        package var maxSubscriptionBytes = 16 << 20
        /// Opens in a row the server closed right after a subscription was sent, before it is set aside.
        package var setAsideAfter = 3
        /// json: the id's path in requests and answers.
        package var idPath: String? = nil
        /// json: the upstream messages the daemon answers itself (the feed's own keepalive).
        package var replies: [Reply] = []
        /// socketio: the namespace connected, and the CONNECT packet's auth payload (JSON text,
        /// placeholders as in upstream.on_open).
        package var namespace: String? = nil
        package var auth: String? = nil
        /// stomp: CONNECT's login, passcode (placeholders), virtual host and heart-beat
        /// (milliseconds: the daemon sends every, it wants every).
        package var login: String? = nil
        package var passcode: String? = nil
        package var host: String? = nil
        package var heartBeat: HeartBeat? = nil
        /// nats: CONNECT's user, pass, auth token (placeholders) and connection name.
        package var user: String? = nil
        package var pass: String? = nil
        package var token: String? = nil
        package var clientName: String? = nil

        /// STOMP's heart-beat setting.
        package struct HeartBeat: Sendable, Equatable {
            package var send: Int
            package var receive: Int
            package init(send: Int, receive: Int) {
                self.send = send
                self.receive = receive
            }
        }

        package init() {}

        /// One `[[protocol.reply]]`.
        package struct Reply: Sendable, Equatable {
            package var when: Filter
            package var send: ReplyTemplate

            package init(when: Filter, send: ReplyTemplate) {
                self.when = when
                self.send = send
            }
        }
    }

    package struct Upstream: Sendable, Equatable {
        /// ws:// or wss:// URL of the upstream.
        package var url = UpstreamURL(scheme: .ws, host: "127.0.0.1", port: 8080, path: "/")
        package var headers: [Header] = []
        package var subprotocols: [String] = []
        package var compression = true
        package var maxMessageSize = 16 * 1024 * 1024
        package var connectTimeout: Duration = .seconds(10)
        /// false: start idle, and connect only on a `connect` request.
        package var connectOnStart = true
        /// Tried in turn after the primary `url` fails (each failed attempt moves to the next,
        /// with the same backoff); headers, token and TLS settings apply to each.
        package var fallbackURLs: [UpstreamURL] = []
        /// While on a fallback, go back to the primary after this long (nil: stay until it fails).
        package var failbackAfter: Duration? = nil
        /// Sent first, in order, on every open (docs/sessions.md): a login, a resume.
        package var onOpen: [OpeningMessage] = []
        /// The link counts as open only once an upstream message matches (nil: at the upgrade).
        package var readyWhen: Filter? = nil
        /// How long after the upgrade a message may take to match `readyWhen`.
        package var readyTimeout: Duration = .seconds(10)

        /// The primary, then the fallbacks.
        package var urls: [UpstreamURL] { [self.url] + self.fallbackURLs }

        package init() {}

        /// An extra HTTP header for the upgrade request.
        package struct Header: Sendable, Equatable {
            package var name: String
            package var value: String
            package init(name: String, value: String) {
                self.name = name
                self.value = value
            }
        }
    }

    package struct Auth: Sendable, Equatable {
        /// A file holding a bearer token, read at every connect (so rotation works). Never logged.
        package var tokenFile: String? = nil
        package init() {}
    }

    package struct TLS: Sendable, Equatable {
        package var caFile: String? = nil
        package var certFile: String? = nil
        package var keyFile: String? = nil
        package var serverName: String? = nil
        package var insecure = false
        package init() {}
    }

    package struct Proxy: Sendable, Equatable {
        /// `http://host:port` (HTTP CONNECT) or `socks5://host:port`; nil means none configured.
        package var url: ProxyURL? = nil
        /// Honour `https_proxy`/`http_proxy`/`all_proxy`/`no_proxy` when `url` is not set.
        package var useEnvironment = true
        package init() {}
    }

    package struct Heartbeat: Sendable, Equatable {
        package var interval: Duration = .seconds(20)
        package var deadline: Duration = .seconds(10)
        /// Optional application-level heartbeat text sent with every ping.
        package var text: String? = nil
        package init() {}
    }

    package struct Backoff: Sendable, Equatable {
        package var policy = BackoffPolicy()
        /// 0 = retry forever.
        package var maxAttempts = 0
        package init() {}
    }

    package struct Reachability: Sendable, Equatable {
        package var enabled = true
        package var pollInterval: Duration = .seconds(30)
        package init() {}
    }

    package struct Local: Sendable, Equatable {
        package var socket = "/run/wsbridged/wsbridged.sock"
        package var mode: UInt32 = 0o660
        package var group: String? = nil
        /// Longest request line accepted from a client, in bytes.
        package var maxLine = 1 << 20
        /// Messages a subscriber may fall behind before it loses the oldest.
        package var subscriberQueue = 4096
        /// Bytes a subscriber may fall behind before it loses the oldest.
        package var subscriberQueueBytes = 16 << 20
        /// Recent messages kept for `since` resumption.
        package var replay = 1024
        /// Bytes of encoded lines the replay ring may hold (the oldest go first).
        package var replayBytes = 16 << 20
        /// Clients connected at once; one more is told why and closed.
        package var maxClients = 1000
        /// Of `maxClients`, the places kept for root, the daemon's own user and `access.write_*`
        /// (as PostgreSQL keeps connections for superusers): the operator is never locked out.
        /// The loader refuses a value set in the file that is not below `maxClients`.
        package var reservedClients = 4

        /// The places kept for privileged clients: at most `maxClients - 1`, so the default
        /// leaves others a place when `maxClients` is tiny.
        package var reserved: Int { min(self.reservedClients, self.maxClients - 1) }
        /// Unread replies and notices a client may have queued before the daemon stops reading
        /// its requests (resumed when half of it drained). Notices alone past twice this
        /// disconnect it.
        package var clientOutputBytes = 1 << 20
        /// Each client socket's kernel send buffer (SO_SNDBUF, which Linux doubles for its own
        /// bookkeeping and caps at net.core.wmem_max); 0 leaves the system's default
        /// (net.core.wmem_default). A reader that empties its socket while the daemon's loop
        /// is busy with an upstream read waits for data; a larger buffer keeps it reading.
        package var sendBufferBytes = 1 << 20
        /// `request`s waiting for their answer, per client and in all.
        package var maxPendingRequests = 64
        package var maxPendingRequestsTotal = 1024
        /// A filter's dotted path: longest in bytes, and most components.
        package var filterMaxBytes = 256
        package var filterMaxDepth = 16
        /// Put a text payload that is JSON inline (`"json": {...}`) instead of as a string.
        package var inlineJSON = false
        /// Sticky keys one client may hold, keys in all, and their bytes in all (key, text and
        /// leave text).
        package var stickyKeysPerClient = 64
        package var stickyKeys = 1024
        package var stickyBytes = 1 << 20
        package init() {}
    }

    /// Sends made while the link is not open wait here, flushed in order on reconnect.
    package struct Queue: Sendable, Equatable {
        package var maxMessages = 1000
        package var maxBytes = 16 << 20
        /// The directory of the durable outbound spool (nil: the queue lives in memory only).
        package var spool: String? = nil
        package var fsync = FsyncPolicy.always
        package init() {}
    }

    /// The journal of upstream messages (docs/journal.md): consumers resume from it across
    /// restarts and after longer than the replay ring keeps.
    package struct Journal: Sendable, Equatable {
        /// Its directory (nil: no journal; the replay ring is all there is).
        package var dir: String? = nil
        /// Whole segments go, oldest first, once the journal holds more than this...
        package var maxBytes = 1 << 30
        /// ...or once their last message is older than this.
        package var maxAge: Duration = .seconds(24 * 3600)
        /// A segment file is closed and a new one begun past this size.
        package var segmentBytes = 64 << 20
        /// `always`: every batch written is fdatasync'd at once; `batch`: at most every
        /// `fsyncInterval`, and only after writes.
        package var fsync = FsyncPolicy.batch
        package var fsyncInterval: Duration = .seconds(1)
        /// Messages waiting for the writer (a disk slower than the feed) beyond this are not
        /// journaled (a `not_durable` gap for a consumer who replays them); live delivery
        /// goes on.
        package var bufferBytes = 64 << 20
        package init() {}
    }

    /// When a queued send (or a journaled message) counts as stored.
    package enum FsyncPolicy: String, Sendable, CaseIterable {
        /// Written and fdatasync'd: survives a crash of the machine. Sends arriving together
        /// share one fdatasync.
        case always
        /// Written to the file: survives a crash or kill of the daemon; fdatasync'd within a
        /// second, so a power loss can take the last second of sends.
        case batch
    }

    /// Who may send, close, connect, reconnect and request (others may subscribe and read status).
    /// root and the daemon's own user may always.
    package struct Access: Sendable, Equatable {
        package var writeUIDs: [UInt32] = []
        package var writeGroups: [String] = []
        package init() {}
    }

    /// The optional HTTP endpoint serving `/metrics` (the `metrics` op works without it).
    package struct Metrics: Sendable, Equatable {
        /// Where to listen; nil (the default) serves no HTTP at all.
        package var listen: HostPort?
        /// HTTP connections at once; one more is closed at once.
        package var maxConnections = 16
        package init() {}
    }

    /// `HOST:PORT` or `[IPv6]:PORT`; port 0 picks a free one.
    package struct HostPort: Sendable, Equatable, CustomStringConvertible {
        package var host: String
        package var port: Int

        package init(host: String, port: Int) {
            self.host = host
            self.port = port
        }

        package init?(parsing text: String) {
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

        package var description: String { self.host.contains(":") ? "[\(self.host)]:\(self.port)" : "\(self.host):\(self.port)" }
    }

    package struct Log: Sendable, Equatable {
        package var level = LogLevel.info
        package init() {}
    }

    package enum LogLevel: String, Sendable, CaseIterable {
        case trace, debug, info, notice, warning, error, critical
    }
}
