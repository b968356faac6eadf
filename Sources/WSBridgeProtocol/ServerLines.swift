/// The lines the daemon writes to its clients (docs/protocol.md), one type each. Each type's
/// keys are its stored properties (or its `CodingKeys`), written once: the daemon builds a line
/// with `json`, clients read it with `ServerLine.decode`, both through `JSONValueCoding`. (Message lines are written by a byte-level encoder for speed; `MessageLine` reads them,
/// and a test holds the two to the same schema.)
public enum ServerLine: Sendable, Equatable {
    case hello(Hello)
    case message(MessageLine)
    case state(StateLine)
    case dropped(DroppedLine)
    case gap(GapLine)
    case reply(ReplyLine)

    /// Reads a line; nil when its `type` is unknown (a newer daemon may add types) or it is malformed.
    public static func decode(_ json: JSONValue) -> ServerLine? {
        switch json["type"]?.stringValue {
        case Hello.type: Hello(json: json).map(ServerLine.hello)
        case MessageLine.type: MessageLine(json: json).map(ServerLine.message)
        case StateLine.type: StateLine(json: json).map(ServerLine.state)
        case DroppedLine.type: DroppedLine(json: json).map(ServerLine.dropped)
        case GapLine.type: GapLine(json: json).map(ServerLine.gap)
        case ReplyLine.type: ReplyLine(json: json).map(ServerLine.reply)
        default: nil
        }
    }
}

/// The first line on every connection.
public struct Hello: Sendable, Equatable, Codable, JSONValueEncodable {
    public static let type = "hello"
    public private(set) var type = Hello.type
    public var protocolVersion: Int
    public var version: String
    /// The git commit the daemon was built from, when it was built from a checkout.
    @OmitNil public var commit: String?
    public var state: ConnectionPhase
    public var seq: UInt64
    /// The stream `seq` counts in: new whenever seq starts again (a daemon restart).
    public var stream: String
    public var subscribed: Bool
    public var write: Bool

    public init(
        protocolVersion: Int = LocalProtocol.version, version: String = WSBridgeVersion.current, commit: String? = WSBridgeVersion.commit,
        state: ConnectionPhase, seq: UInt64, stream: String, subscribed: Bool, write: Bool
    ) {
        self.protocolVersion = protocolVersion
        self.version = version
        self.commit = commit
        self.state = state
        self.seq = seq
        self.stream = stream
        self.subscribed = subscribed
        self.write = write
    }

    enum CodingKeys: String, CodingKey {
        case type
        case protocolVersion = "protocol"
        case version, commit, state, seq, stream, subscribed, write
    }

    public init?(json: JSONValue) {
        guard json["type"]?.stringValue == Self.type, let hello = try? JSONValueCoding.decode(Self.self, from: json) else { return nil }
        self = hello
    }
}

/// One upstream message. `data` holds a text payload, or a binary one in base64; with
/// `local.inline_json` a JSON text payload comes as `json` instead.
public struct MessageLine: Sendable, Equatable, Codable, JSONValueEncodable {
    public static let type = "message"
    public enum Kind: String, Sendable, Codable { case text, binary }
    public private(set) var type = MessageLine.type
    public var seq: UInt64
    /// Receive time, milliseconds since the Unix epoch.
    public var ts: Int64
    public var kind: Kind
    @OmitNil public var data: String?
    @OmitNil public var inlineJSON: JSONValue?

    public init(seq: UInt64, ts: Int64, kind: Kind, data: String?, inlineJSON: JSONValue? = nil) {
        self.seq = seq
        self.ts = ts
        self.kind = kind
        self.data = data
        self.inlineJSON = inlineJSON
    }

    enum CodingKeys: String, CodingKey {
        case type, seq, ts, kind, data
        case inlineJSON = "json"
    }

    public init?(json: JSONValue) {
        guard json["type"]?.stringValue == Self.type, let line = try? JSONValueCoding.decode(Self.self, from: json) else { return nil }
        self = line
    }

    /// The byte-level encoder's pieces, in order: `{"type":"message","seq":` N `,"ts":` MILLIS,
    /// then one of the kind pieces, the payload, and `}` + newline.
    public static let head: StaticString = #"{"type":"message","seq":"#
    public static let tsKey: StaticString = #","ts":"#
    public static let textData: StaticString = #","kind":"text","data":"#
    public static let textJSON: StaticString = #","kind":"text","json":"#
    public static let binaryData: StaticString = #","kind":"binary","data":""#
    public static let tail: StaticString = "}\n"
}

/// The link changed state; `reason` says why and who caused it.
public struct StateLine: Sendable, Equatable, Codable, JSONValueEncodable {
    public static let type = "state"
    public private(set) var type = StateLine.type
    public var state: ConnectionPhase
    public var reason: String
    public var ts: Int64

    public init(state: ConnectionPhase, reason: String, ts: Int64) {
        self.state = state
        self.reason = reason
        self.ts = ts
    }

    public init?(json: JSONValue) {
        guard json["type"]?.stringValue == Self.type, let line = try? JSONValueCoding.decode(Self.self, from: json) else { return nil }
        self = line
    }
}

/// This subscriber fell behind and lost messages `from`...`to` (inclusive).
public struct DroppedLine: Sendable, Equatable, Codable, JSONValueEncodable {
    public static let type = "dropped"
    public private(set) var type = DroppedLine.type
    public static let reasonText = "this subscriber fell behind by more than local.subscriber_queue messages or local.subscriber_queue_bytes bytes"
    public var count: UInt64
    public var from: UInt64
    public var to: UInt64
    public var reason: String

    public init(count: UInt64, from: UInt64, to: UInt64, reason: String = DroppedLine.reasonText) {
        self.count = count
        self.from = from
        self.to = to
        self.reason = reason
    }

    public init?(json: JSONValue) {
        guard json["type"]?.stringValue == Self.type, let line = try? JSONValueCoding.decode(Self.self, from: json) else { return nil }
        self = line
    }
}

/// After `subscribe` with `since`: what this consumer will not receive, said where it is
/// missing. `reason` is a stable code: `not_buffered` (messages `from`...`to` left the replay
/// ring), `restarted` (the daemon started a new stream since the consumer's `since`: sequence
/// numbers began again at 1, and `next` is where this stream's delivery starts); with a journal
/// (docs/journal.md) `expired` (retention removed `from`...`to`), `damaged` (a record that fails
/// its checksum), `not_durable` (never written to the journal: with `from`...`to` a hole the
/// writer recorded, without them what a crashed run numbered after its last journaled message,
/// `next` then counting in the next run's `stream`). `message` says it in words.
public struct GapLine: Sendable, Equatable, Codable, JSONValueEncodable {
    public static let type = "gap"
    public static let notBuffered = "not_buffered"
    public static let restarted = "restarted"
    public static let expired = "expired"
    public static let damaged = "damaged"
    public static let notDurable = "not_durable"
    /// A fleet's cold standby took over from its leader (docs/fleet.md): what the upstream sent
    /// meanwhile reached no bridge.
    public static let leaderChanged = "leader_changed"
    public private(set) var type = GapLine.type
    /// The stream the seq numbers of this line (`from`, `to`, `next`) belong to.
    public var stream: String
    public var reason: String
    /// The missing range (`not_buffered`); nil for `restarted`.
    @OmitNil public var from: UInt64?
    @OmitNil public var to: UInt64?
    /// `leader_changed`: the seq of the last message before the gap (the previous leader's last
    /// in the stream): what the upstream sent after it and before `next` reached no bridge.
    @OmitNil public var after: UInt64?
    /// The seq of the next line this consumer gets in `stream` (the first replayed, or the next new one).
    public var next: UInt64
    /// `restarted`: the `since` the consumer asked for, in its old stream.
    @OmitNil public var since: UInt64?
    public var message: String

    /// Whether a consumer's `since` (in `stream`, nil when it did not say) cannot belong to the
    /// daemon's stream `current`, whose last seq is `last`: another stream, or a seq this one
    /// has not reached (counted in an earlier run). The daemon answers it with `restarted`.
    public static func isRestart(since: UInt64, stream: String?, current: String, last: UInt64) -> Bool {
        if let stream { return stream != current }
        return since > last
    }

    public init(
        stream: String, reason: String, from: UInt64? = nil, to: UInt64? = nil, after: UInt64? = nil, next: UInt64, since: UInt64? = nil, message: String
    ) {
        self.stream = stream
        self.reason = reason
        self.from = from
        self.to = to
        self.after = after
        self.next = next
        self.since = since
        self.message = message
    }

    enum CodingKeys: String, CodingKey {
        case type, stream, reason, from, to, after, since, next, message
    }

    public init?(json: JSONValue) {
        guard json["type"]?.stringValue == Self.type, let line = try? JSONValueCoding.decode(Self.self, from: json) else { return nil }
        self = line
    }
}

/// The answer to a request: `result` when `ok`, else `error`.
public struct ReplyLine: Sendable, Equatable {
    public static let type = "reply"
    public var id: JSONValue?
    public var outcome: Result<JSONValue, ProtocolError>

    public init(id: JSONValue?, _ outcome: Result<JSONValue, ProtocolError>) {
        self.id = id
        self.outcome = outcome
    }

    public static func ok(id: JSONValue?, _ result: JSONValue = .object([])) -> ReplyLine { ReplyLine(id: id, .success(result)) }

    /// The line's one shape: `result` when `ok`, else `error`.
    private struct Wire: Codable {
        var type = ReplyLine.type
        var id: JSONValue
        var ok: Bool
        @OmitNil var result: JSONValue?
        @OmitNil var error: Failure?

        struct Failure: Codable, Equatable, Sendable {
            var code: String
            var message: String
        }
    }

    public var json: JSONValue {
        switch self.outcome {
        case .success(let result): JSONValueCoding.encode(Wire(id: self.id ?? .null, ok: true, result: result))
        case .failure(let error): JSONValueCoding.encode(Wire(id: self.id ?? .null, ok: false, error: .init(code: error.code.rawValue, message: error.message)))
        }
    }

    /// The error's code is kept as sent: a newer daemon's code this client does not know reads as `internal`.
    public init?(json: JSONValue) {
        guard json["type"]?.stringValue == Self.type, json["ok"]?.boolValue != nil, let wire = try? JSONValueCoding.decode(Wire.self, from: json) else {
            return nil
        }
        // `.none`, not `nil`: beside a JSONValue, the nil literal is JSON's null.
        let id: JSONValue? = wire.id == .null ? .none : wire.id
        if wire.ok {
            self.init(id: id, .success(wire.result ?? .null))
        } else {
            let code = wire.error.flatMap { ErrorCode(rawValue: $0.code) } ?? .internalError
            let message = wire.error?.message ?? "request failed"
            self.init(id: id, .failure(ProtocolError(code, message, id: id)))
        }
    }
}

extension ReplyLine {
    /// A successful reply whose result never changes (a send's `sent`), as the line's bytes
    /// before and after its id. They are cut from the line `json` encodes, once, so the bytes are
    /// the schema's; a reply then costs its id, not an encoding (the send path's largest cost).
    public struct Constant: Sendable {
        /// `{"type":"reply","id":`
        public let head: [UInt8]
        /// `,"ok":true,"result":...}` and the newline.
        public let tail: [UInt8]

        public init(result: JSONValue) {
            let line = Array(ReplyLine.ok(id: .null, result).json.serialized.utf8)
            let key = Array(#""id":null"#.utf8)
            guard let at = (0...(line.count - key.count)).first(where: { line[$0..<($0 + key.count)].elementsEqual(key) }) else {
                preconditionFailure("a reply line has no \"id\": \(String(decoding: line, as: UTF8.self))")
            }
            let idStart = at + key.count - 4
            self.head = Array(line[..<idStart])
            self.tail = Array(line[(idStart + 4)...]) + [UInt8(ascii: "\n")]
        }

        /// The whole line for one request's id, newline included.
        public func line(id: JSONValue?) -> [UInt8] {
            var out = self.head
            out.reserveCapacity(self.head.count + self.tail.count + 16)
            (id ?? .null).write(into: &out)
            out.append(contentsOf: self.tail)
            return out
        }
    }
}

extension JSONValue {
    /// The value as a UInt64 when it is a whole number >= 0 that fits.
    public var uint64Value: UInt64? {
        guard case .number(let n) = self else { return nil }
        if let u = UInt64(n.text) { return u }
        return n.intValue.flatMap { $0 >= 0 ? UInt64($0) : nil }
    }
}
