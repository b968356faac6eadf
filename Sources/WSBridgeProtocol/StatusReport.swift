/// `status`: the link, its counters, the send queue and the local plane.
public struct StatusReport: Sendable, Equatable {
    public struct Queue: Sendable, Equatable {
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

    public struct Spool: Sendable, Equatable {
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

    /// The session the daemon restores on every open (docs/sessions.md).
    public struct Session: Sendable, Equatable {
        /// `upstream.on_open`: how many opening messages go first on every open.
        public var openingMessages: Int
        /// `upstream.ready_when` as `FIELD=VALUE`, when set.
        public var readyWhen: String?
        /// `waiting` while the link is up and no message matched `ready_when` yet, else `ready`
        /// (the link is open) or `down`.
        public var ready: String
        public var stickyKeys: Int
        public var stickyBytes: Int

        public init(openingMessages: Int, readyWhen: String?, ready: String, stickyKeys: Int, stickyBytes: Int) {
            self.openingMessages = openingMessages
            self.readyWhen = readyWhen
            self.ready = ready
            self.stickyKeys = stickyKeys
            self.stickyBytes = stickyBytes
        }
    }

    public struct Close: Sendable, Equatable {
        public var code: UInt16?
        public var reason: String
        /// `server`, `user` or `error`.
        public var by: String

        public init(code: UInt16?, reason: String, by: String) {
            self.code = code
            self.reason = reason
            self.by = by
        }
    }

    public var state: ConnectionPhase
    /// When the link entered `state`, ms since the Unix epoch.
    public var since: Int64
    public var url: String
    public var reconnects: Int
    public var failedAttempts: Int
    public var rttMillis: Double?
    public var subprotocol: String?
    public var compression: Bool
    public var messagesIn: UInt64
    public var bytesIn: UInt64
    public var messagesOut: UInt64
    public var bytesOut: UInt64
    public var subscribers: Int
    public var clients: Int
    public var seq: UInt64
    public var drops: UInt64
    /// The stream `seq` counts in: new whenever seq starts again (a daemon restart).
    public var stream: String
    public var queue: Queue
    public var session: Session?
    public var lastError: String?
    /// Why the last attempt failed: `error`, or `not_ready` (no message matched
    /// `upstream.ready_when` within `upstream.ready_timeout`).
    public var lastErrorReason: String?
    public var lastClose: Close?
    public var retryInMillis: Int64?
    public var version: String

    public init(
        state: ConnectionPhase, since: Int64, url: String, reconnects: Int, failedAttempts: Int, rttMillis: Double?, subprotocol: String?,
        compression: Bool, messagesIn: UInt64, bytesIn: UInt64, messagesOut: UInt64, bytesOut: UInt64, subscribers: Int, clients: Int,
        seq: UInt64, drops: UInt64, stream: String = "", queue: Queue, session: Session? = nil, lastError: String?, lastErrorReason: String? = nil,
        lastClose: Close?, retryInMillis: Int64?, version: String = WSBridgeVersion.current
    ) {
        self.state = state
        self.since = since
        self.url = url
        self.reconnects = reconnects
        self.failedAttempts = failedAttempts
        self.rttMillis = rttMillis
        self.subprotocol = subprotocol
        self.compression = compression
        self.messagesIn = messagesIn
        self.bytesIn = bytesIn
        self.messagesOut = messagesOut
        self.bytesOut = bytesOut
        self.subscribers = subscribers
        self.clients = clients
        self.seq = seq
        self.drops = drops
        self.stream = stream
        self.queue = queue
        self.session = session
        self.lastError = lastError
        self.lastErrorReason = lastErrorReason
        self.lastClose = lastClose
        self.retryInMillis = retryInMillis
        self.version = version
    }

    public var json: JSONValue {
        func n(_ v: some BinaryInteger) -> JSONValue { .number(JSONNumber(v)) }
        var fields: [(String, JSONValue)] = [
            ("state", self.state.wire),
            ("since", n(self.since)),
            ("url", .string(self.url)),
            ("reconnects", n(self.reconnects)),
            ("failed_attempts", n(self.failedAttempts)),
            ("rtt_ms", self.rttMillis.map { .number(JSONNumber(($0 * 1000).rounded() / 1000)) } ?? .null),
            ("subprotocol", self.subprotocol.map { .string($0) } ?? .null),
            ("compression", .bool(self.compression)),
            ("messages_in", n(self.messagesIn)),
            ("bytes_in", n(self.bytesIn)),
            ("messages_out", n(self.messagesOut)),
            ("bytes_out", n(self.bytesOut)),
            ("subscribers", n(self.subscribers)),
            ("clients", n(self.clients)),
            ("seq", n(self.seq)),
            ("stream", .string(self.stream)),
            ("drops", n(self.drops)),
            (
                "queue",
                [
                    "messages": n(self.queue.messages), "bytes": n(self.queue.bytes),
                    "max_messages": n(self.queue.maxMessages), "max_bytes": n(self.queue.maxBytes),
                    "spool": self.queue.spool.map { sp in
                        ["directory": .string(sp.directory), "fsync": .string(sp.fsync), "file_bytes": n(sp.fileBytes), "fsyncs": n(sp.fsyncs)]
                    } ?? .null,
                ]
            ),
            (
                "session",
                self.session.map { se in
                    [
                        "opening_messages": n(se.openingMessages), "ready_when": se.readyWhen.map { .string($0) } ?? .null,
                        "ready": .string(se.ready), "sticky_keys": n(se.stickyKeys), "sticky_bytes": n(se.stickyBytes),
                    ]
                } ?? .null
            ),
            ("last_error", self.lastError.map { .string($0) } ?? .null),
            ("last_error_reason", self.lastErrorReason.map { .string($0) } ?? .null),
            ("version", .string(self.version)),
        ]
        if let close = self.lastClose {
            fields.append(("last_close", ["code": close.code.map { n($0) } ?? .null, "reason": .string(close.reason), "by": .string(close.by)]))
        } else {
            fields.append(("last_close", .null))
        }
        if let retry = self.retryInMillis { fields.append(("retry_in_ms", n(retry))) }
        return .object(fields)
    }

    /// Reads a status result; fields a daemon did not send read as zero or absent.
    public init(json s: JSONValue) {
        func int(_ key: String) -> Int { s[key]?.intValue ?? 0 }
        func u64(_ key: String) -> UInt64 { s[key]?.uint64Value ?? 0 }
        let q = s["queue"]
        let se = s["session"].flatMap { v -> JSONValue? in
            guard case .object = v else { return nil }
            return v
        }
        let close: Close? = s["last_close"].flatMap { c in
            guard case .object = c else { return nil }
            return Close(code: c["code"]?.intValue.map { UInt16(clamping: $0) }, reason: c["reason"]?.stringValue ?? "", by: c["by"]?.stringValue ?? "?")
        }
        self.init(
            state: ConnectionPhase(wire: s["state"]?.stringValue),
            since: Int64(int("since")),
            url: s["url"]?.stringValue ?? "?",
            reconnects: int("reconnects"),
            failedAttempts: int("failed_attempts"),
            rttMillis: s["rtt_ms"]?.doubleValue,
            subprotocol: s["subprotocol"]?.stringValue,
            compression: s["compression"]?.boolValue ?? false,
            messagesIn: u64("messages_in"),
            bytesIn: u64("bytes_in"),
            messagesOut: u64("messages_out"),
            bytesOut: u64("bytes_out"),
            subscribers: int("subscribers"),
            clients: int("clients"),
            seq: u64("seq"),
            drops: u64("drops"),
            stream: s["stream"]?.stringValue ?? "",
            queue: Queue(
                messages: q?["messages"]?.intValue ?? 0,
                bytes: q?["bytes"]?.intValue ?? 0,
                maxMessages: q?["max_messages"]?.intValue ?? 0,
                maxBytes: q?["max_bytes"]?.intValue ?? 0,
                spool: q?["spool"]?["directory"]?.stringValue.map { directory in
                    Spool(
                        directory: directory,
                        fsync: q?["spool"]?["fsync"]?.stringValue ?? "?",
                        fileBytes: q?["spool"]?["file_bytes"]?.intValue ?? 0,
                        fsyncs: q?["spool"]?["fsyncs"]?.uint64Value ?? 0
                    )
                }
            ),
            session: se.map { se in
                Session(
                    openingMessages: se["opening_messages"]?.intValue ?? 0, readyWhen: se["ready_when"]?.stringValue,
                    ready: se["ready"]?.stringValue ?? "?", stickyKeys: se["sticky_keys"]?.intValue ?? 0, stickyBytes: se["sticky_bytes"]?.intValue ?? 0)
            },
            lastError: s["last_error"]?.stringValue,
            lastErrorReason: s["last_error_reason"]?.stringValue,
            lastClose: close,
            retryInMillis: s["retry_in_ms"]?.intValue.map(Int64.init),
            version: s["version"]?.stringValue ?? "?"
        )
    }
}
