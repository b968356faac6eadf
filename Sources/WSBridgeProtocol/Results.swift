/// The `result` objects of successful replies, one type per op (docs/protocol.md).

/// `subscribe` and `unsubscribe`.
public struct SubscribeResult: Sendable, Equatable {
    public var subscribed: Bool
    /// The last sequence number sent so far (`subscribe` only).
    public var seq: UInt64?
    /// The stream `seq` counts in (`subscribe` only).
    public var stream: String?
    public var filter: Filter?

    public init(subscribed: Bool, seq: UInt64? = nil, stream: String? = nil, filter: Filter? = nil) {
        self.subscribed = subscribed
        self.seq = seq
        self.stream = stream
        self.filter = filter
    }

    public var json: JSONValue {
        var fields: [(String, JSONValue)] = [("subscribed", .bool(self.subscribed))]
        if let seq { fields.append(("seq", .number(JSONNumber(seq)))) }
        if let stream { fields.append(("stream", .string(stream))) }
        if let filter { fields.append(("filter", filter.json)) }
        return .object(fields)
    }

    public init(json: JSONValue) {
        let filter = json["filter"].flatMap { f in f["field"]?.stringValue.map { Filter(field: $0, equals: f["equals"]) } }
        self.init(subscribed: json["subscribed"]?.boolValue ?? false, seq: json["seq"]?.uint64Value, stream: json["stream"]?.stringValue, filter: filter)
    }
}

/// `send`: sent now, or queued until the link opens.
public enum SendResult: Sendable, Equatable {
    case sent
    /// `depth` messages wait, this one included; `state` is the link's.
    case queued(depth: Int, state: ConnectionPhase)
    /// A sticky send (`"sticky": KEY`).
    case sticky(StickyResult)

    public var json: JSONValue {
        switch self {
        case .sent: ["status": "sent"]
        case .queued(let depth, let state): ["status": "queued", "queued": .number(JSONNumber(depth)), "state": state.wire]
        case .sticky(let r):
            [
                "status": .string(r.status.rawValue), "state": r.state.wire,
                "sticky": ["key": .string(r.key), "scope": .string(r.scope.rawValue), "holders": .number(JSONNumber(r.holders))],
            ]
        }
    }

    public init?(json: JSONValue) {
        if let sticky = json["sticky"], let key = sticky["key"]?.stringValue {
            guard let status = json["status"]?.stringValue.flatMap(StickyResult.Status.init) else { return nil }
            self = .sticky(
                StickyResult(
                    status: status, key: key, scope: sticky["scope"]?.stringValue.flatMap(StickyScope.init) ?? .client,
                    holders: sticky["holders"]?.intValue ?? 1, state: ConnectionPhase(wire: json["state"]?.stringValue)))
            return
        }
        switch json["status"]?.stringValue {
        case "sent": self = .sent
        case "queued": self = .queued(depth: json["queued"]?.intValue ?? 0, state: ConnectionPhase(wire: json["state"]?.stringValue))
        default: return nil
        }
    }
}

/// What a sticky send did.
public struct StickyResult: Sendable, Equatable {
    public enum Status: String, Sendable {
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
public struct StickyListResult: Sendable, Equatable {
    public struct Holder: Sendable, Equatable {
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
    public struct Key: Sendable, Equatable {
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

    public var json: JSONValue {
        func n(_ v: some BinaryInteger) -> JSONValue { .number(JSONNumber(v)) }
        return [
            "keys": .array(
                self.keys.map { k in
                    [
                        "key": .string(k.key), "bytes": n(k.bytes), "preview": .string(k.preview), "on_unstick": .bool(k.onUnstick), "since": n(k.since),
                        "holders": .array(
                            k.holders.map { h in
                                [
                                    "scope": .string(h.scope.rawValue), "pid": h.pid.map { n($0) } ?? .null, "uid": h.uid.map { n($0) } ?? .null,
                                    "since": n(h.since),
                                ]
                            }),
                    ]
                })
        ]
    }

    public init(json: JSONValue) {
        guard case .array(let items)? = json["keys"] else {
            self.init(keys: [])
            return
        }
        self.init(
            keys: items.map { k in
                let holders: [Holder]
                if case .array(let hs)? = k["holders"] {
                    holders = hs.map { h in
                        Holder(
                            scope: h["scope"]?.stringValue.flatMap(StickyScope.init) ?? .client, pid: h["pid"]?.intValue.map { Int32(clamping: $0) },
                            uid: h["uid"]?.uint64Value.map { UInt32(clamping: $0) }, since: Int64(h["since"]?.intValue ?? 0))
                    }
                } else {
                    holders = []
                }
                return Key(
                    key: k["key"]?.stringValue ?? "", bytes: k["bytes"]?.intValue ?? 0, preview: k["preview"]?.stringValue ?? "",
                    onUnstick: k["on_unstick"]?.boolValue ?? false, since: Int64(k["since"]?.intValue ?? 0), holders: holders)
            })
    }
}

/// `unstick`: whether the key went (its last holder let go) and what was sent upstream.
public struct UnstickResult: Sendable, Equatable {
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

    public var json: JSONValue { ["key": .string(self.key), "holders": .number(JSONNumber(self.holders)), "leave": .string(self.leave)] }

    public init(json: JSONValue) {
        self.init(key: json["key"]?.stringValue ?? "", holders: json["holders"]?.intValue ?? 0, leave: json["leave"]?.stringValue ?? "none")
    }
}

/// `close`, `connect` and `reconnect`: the link's state once the request was taken.
public struct LinkStateResult: Sendable, Equatable {
    public var state: ConnectionPhase

    public init(state: ConnectionPhase) {
        self.state = state
    }

    public var json: JSONValue { ["state": self.state.wire] }

    public init(json: JSONValue) {
        self.init(state: ConnectionPhase(wire: json["state"]?.stringValue))
    }
}

/// `metrics`: the daemon's metrics in the Prometheus text exposition format (version 0.0.4).
public struct MetricsResult: Sendable, Equatable {
    public static let format = "prometheus-text-0.0.4"
    public var text: String

    public init(text: String) {
        self.text = text
    }

    public var json: JSONValue { ["format": .string(Self.format), "text": .string(self.text)] }

    public init(json: JSONValue) {
        self.init(text: json["text"]?.stringValue ?? "")
    }
}

/// `request`: the first upstream message after the send that matched.
public struct RequestResult: Sendable, Equatable {
    public var seq: UInt64
    public var payload: JSONValue

    public init(seq: UInt64, payload: JSONValue) {
        self.seq = seq
        self.payload = payload
    }

    public var json: JSONValue { ["seq": .number(JSONNumber(self.seq)), "kind": "text", "json": self.payload] }

    public init?(json: JSONValue) {
        guard let seq = json["seq"]?.uint64Value, let payload = json["json"] else { return nil }
        self.init(seq: seq, payload: payload)
    }
}
