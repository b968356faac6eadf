/// The `result` objects of successful replies, one type per op (docs/protocol.md).

/// `subscribe` and `unsubscribe`.
public struct SubscribeResult: Sendable, Equatable, JSONValueCodable {
    public var subscribed: Bool
    /// The last sequence number sent so far (`subscribe` only).
    @OmitNil public var seq: UInt64?
    /// The stream `seq` counts in (`subscribe` only).
    @OmitNil public var stream: String?
    @OmitNil public var filter: Filter?

    public init(subscribed: Bool, seq: UInt64? = nil, stream: String? = nil, filter: Filter? = nil) {
        self.subscribed = subscribed
        self.seq = seq
        self.stream = stream
        self.filter = filter
    }

}

/// What a queued send waits for.
public enum SendWait: String, Sendable, Codable, Equatable {
    /// The link to open.
    case link
    /// The connection's pace (`upstream.limits`): it goes as the pace allows.
    case pace
    /// Its turn: sends ahead of it, or the upstream reading slower than it is written to.
    case turn
}

/// `send`: sent now, or queued until the link opens.
public enum SendResult: Sendable, Equatable {
    case sent
    /// With `upstream.protocol`: the daemon answered it itself and sent nothing upstream (the
    /// app's own handshake or keepalive, a subscription already held).
    case answered
    /// `depth` messages wait, this one included; `state` is the link's; `waits`: for what (nil
    /// from a daemon that does not say).
    case queued(depth: Int, state: ConnectionPhase, waits: SendWait? = nil)
    /// A sticky send (`"sticky": KEY`).
    case sticky(StickyResult)

    /// The reply's one shape: `status`, the link's `state`, and `queued` or `sticky` as the
    /// status calls for.
    private struct Wire: Codable {
        var status: String
        @OmitNil var queued: Int?
        var state: ConnectionPhase
        @OmitNil var waits: SendWait?
        @OmitNil var sticky: Sticky?

        struct Sticky: Codable, Equatable, Sendable {
            var key: String
            var scope: StickyScope
            var holders: Int
        }
    }

    public var json: JSONValue {
        switch self {
        case .sent: JSONValueCoding.encode(Wire(status: "sent", state: .open))
        case .answered: JSONValueCoding.encode(Wire(status: "answered", state: .open))
        case .queued(let depth, let state, let waits): JSONValueCoding.encode(Wire(status: "queued", queued: depth, state: state, waits: waits))
        case .sticky(let r):
            JSONValueCoding.encode(Wire(status: r.status.rawValue, state: r.state, sticky: .init(key: r.key, scope: r.scope, holders: r.holders)))
        }
    }

    public init(json: JSONValue) throws(JSONValueDecodingError) {
        let wire = try JSONValueCoding.decode(Wire.self, from: json)
        if let sticky = wire.sticky {
            guard let status = StickyResult.Status(rawValue: wire.status) else {
                throw JSONValueDecodingError(path: "status", problem: "\"\(wire.status)\" is not a sticky send's status")
            }
            self = .sticky(StickyResult(status: status, key: sticky.key, scope: sticky.scope, holders: sticky.holders, state: wire.state))
            return
        }
        switch wire.status {
        case "sent": self = .sent
        case "answered": self = .answered
        case "queued": self = .queued(depth: wire.queued ?? 0, state: wire.state, waits: wire.waits)
        default: throw JSONValueDecodingError(path: "status", problem: "\"\(wire.status)\" is not a send's status")
        }
    }
}

/// What a sticky send did.
public struct StickyResult: Sendable, Equatable {
    public enum Status: String, Sendable, Codable {
        /// Sent upstream now (a new key, or a new text for a key only this client holds).
        case sent
        /// The link is not open: it goes first thing after the next open (and every one after).
        case queued
        /// Already held with the same text: nothing sent, this client holds it too.
        case held
    }
    public var status: Status
    public var key: String
    public var scope: StickyScope
    /// Clients (and the daemon, for scope daemon) holding the key now.
    public var holders: Int
    /// The link's state.
    public var state: ConnectionPhase

    public init(status: Status, key: String, scope: StickyScope, holders: Int, state: ConnectionPhase) {
        self.status = status
        self.key = key
        self.scope = scope
        self.holders = holders
        self.state = state
    }
}

/// `sticky`: the registered keys, in the order they go out after every open.
public struct StickyListResult: Sendable, Equatable, JSONValueCodable {
    public struct Holder: Sendable, Equatable, Codable {
        public var scope: StickyScope
        /// The registering process (for scope daemon: the one that registered it).
        public var pid: Int32?
        public var uid: UInt32?
        /// When this holder registered, ms since the Unix epoch.
        public var since: Int64

        public init(scope: StickyScope, pid: Int32?, uid: UInt32?, since: Int64) {
            self.scope = scope
            self.pid = pid
            self.uid = uid
            self.since = since
        }
    }
    public struct Key: Sendable, Equatable, Codable {
        public var key: String
        public var bytes: Int
        /// The registered text (binary payloads as `[N bytes]`), cut to 200 bytes.
        public var preview: String
        public var onUnstick: Bool
        /// When the key was first registered, ms since the Unix epoch.
        public var since: Int64
        public var holders: [Holder]

        public init(key: String, bytes: Int, preview: String, onUnstick: Bool, since: Int64, holders: [Holder]) {
            self.key = key
            self.bytes = bytes
            self.preview = preview
            self.onUnstick = onUnstick
            self.since = since
            self.holders = holders
        }
    }
    public var keys: [Key]

    public init(keys: [Key]) {
        self.keys = keys
    }

}

/// `unstick`: whether the key went (its last holder let go) and what was sent upstream.
public struct UnstickResult: Sendable, Equatable, JSONValueCodable {
    public var key: String
    /// Holders left; 0 when the key went.
    public var holders: Int
    /// `sent` (the leave text went upstream), `none` (no leave text, or the key is still held),
    /// or `skipped` (the link is not open: the next connection never had the key).
    public var leave: String

    public init(key: String, holders: Int, leave: String) {
        self.key = key
        self.holders = holders
        self.leave = leave
    }

}

/// `close`, `connect` and `reconnect`: the link's state once the request was taken.
public struct LinkStateResult: Sendable, Equatable, JSONValueCodable {
    /// The phase after the command.
    public var state: ConnectionPhase
    /// The phase before it (older daemons leave it out).
    @OmitNil public var was: ConnectionPhase?

    public init(state: ConnectionPhase, was: ConnectionPhase? = nil) {
        self.state = state
        self.was = was
    }

}

/// `metrics`: the daemon's metrics in the Prometheus text exposition format (version 0.0.4).
public struct MetricsResult: Sendable, Equatable, JSONValueCodable {
    public static let prometheusText = "prometheus-text-0.0.4"
    public var format: String
    public var text: String

    public init(text: String) {
        self.format = Self.prometheusText
        self.text = text
    }

}

/// `clients`: every local client of the daemon now (the one asking included), and the seq the
/// fan-out numbered last.
public struct ClientsResult: Sendable, Equatable, JSONValueCodable {
    public var seq: UInt64
    public var clients: [Client]

    public init(seq: UInt64, clients: [Client]) {
        self.seq = seq
        self.clients = clients
    }

    /// One client: its number and peer, whether it subscribes (and its filter), the messages
    /// queued for it since it connected, those waiting in its queue now (and their bytes),
    /// those dropped because it fell behind, and whether it lags now.
    public struct Client: Sendable, Equatable, Codable {
        public var id: Int
        @OmitNil public var pid: Int32?
        @OmitNil public var uid: UInt32?
        public var subscribed: Bool
        @OmitNil public var filter: String?
        public var messages: UInt64
        public var queued: Int
        public var queueBytes: Int
        public var drops: UInt64
        /// It dropped messages and its queue has not emptied since: its socket has
        /// `local.lagging_send_buffer_bytes` (absent: false).
        @OmitNil public var lagging: Bool? = nil
        /// Its socket's send buffer as the daemon set it (`local.lagging_send_buffer_bytes` until
        /// it reads fast, then `local.send_buffer_bytes`; absent: the system's default).
        @OmitNil public var sendBuffer: Int? = nil
        /// `websocket` for an app of the WebSocket face (absent: the NDJSON socket's).
        @OmitNil public var face: String? = nil
        /// A WebSocket app's peer (`tcp 127.0.0.1:53412` or `unix`), its request's path and its
        /// `User-Agent`.
        @OmitNil public var address: String? = nil
        @OmitNil public var path: String? = nil
        @OmitNil public var userAgent: String? = nil
        /// With `upstream.protocol`: its name, and the subscriptions this client's app holds in
        /// the protocol layer (shared or not).
        @OmitNil public var `protocol`: String? = nil
        @OmitNil public var subscriptions: Int? = nil

        public init(id: Int, pid: Int32?, uid: UInt32?, subscribed: Bool, filter: String?, messages: UInt64, queued: Int, queueBytes: Int, drops: UInt64) {
            self.id = id
            self.pid = pid
            self.uid = uid
            self.subscribed = subscribed
            self.filter = filter
            self.messages = messages
            self.queued = queued
            self.queueBytes = queueBytes
            self.drops = drops
        }
    }
}

/// `request`: the first upstream message after the send that matched.
public struct RequestResult: Sendable, Equatable, JSONValueCodable {
    public var seq: UInt64
    /// Always `text` (a request's answer is a JSON text message).
    public var kind: String
    public var payload: JSONValue

    public init(seq: UInt64, payload: JSONValue) {
        self.seq = seq
        self.kind = "text"
        self.payload = payload
    }

    enum CodingKeys: String, CodingKey {
        case seq, kind
        case payload = "json"
    }

}
