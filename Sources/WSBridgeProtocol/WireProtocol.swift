import ExtrasBase64

/// The local plane's newline-delimited JSON protocol, version 1 (docs/protocol.md).
public enum WireProtocol {
    public static let version = 1
    /// The default socket path.
    public static let defaultSocket = "/run/wsbridged/wsbridged.sock"
}

/// Operations a client may request.
public enum Op: String, Sendable, CaseIterable {
    case subscribe, unsubscribe, send, status, metrics, close, connect, reconnect, request, sticky, unstick
    case clearSetAside = "clear_set_aside"

    /// Whether the op changes the link (needs write permission).
    public var writes: Bool {
        switch self {
        case .subscribe, .unsubscribe, .status, .metrics, .sticky: false
        case .send, .close, .connect, .reconnect, .request, .unstick, .clearSetAside: true
        }
    }
}

/// Stable, machine-readable error codes (never renamed; new ones may be added).
public enum ErrorCode: String, Sendable, CaseIterable {
    case invalidJSON = "invalid_json"
    case invalidUTF8 = "invalid_utf8"
    case lineTooLong = "line_too_long"
    case notAnObject = "not_an_object"
    case unknownOp = "unknown_op"
    case missingField = "missing_field"
    case wrongType = "wrong_type"
    case invalidValue = "invalid_value"
    case badVersion = "bad_version"
    case forbidden
    case queueFull = "queue_full"
    case timeout
    case notConnected = "not_connected"
    /// A `request` was sent, and the link dropped before its answer came (it cannot come now).
    case linkLost = "link_lost"
    case shuttingDown = "shutting_down"
    case tooManyClients = "too_many_clients"
    case tooManyRequests = "too_many_requests"
    case outputNotRead = "output_not_read"
    /// A sticky key is held by another client with a different text (or only by others).
    case stickyConflict = "sticky_conflict"
    /// A sticky registration would pass `local.sticky_*`.
    case stickyLimit = "sticky_limit"
    /// `unstick` named a key nobody holds.
    case unknownKey = "unknown_key"
    case internalError = "internal"
}

/// An error reply: code, what to fix, and the request's id when it could be read.
public struct ProtocolError: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: ErrorCode
    public var message: String
    public var id: JSONValue?

    public init(_ code: ErrorCode, _ message: String, id: JSONValue? = nil) {
        self.code = code
        self.message = message
        self.id = id
    }

    public var description: String { "\(self.code.rawValue): \(self.message)" }

    /// The reply line for this error.
    public var reply: JSONValue { ReplyLine(id: self.id, .failure(self)).json }
}

/// A message payload: text, or binary carried as base64 on the wire.
public enum Payload: Sendable, Equatable {
    case text(String)
    case binary([UInt8])

    public var byteCount: Int {
        switch self {
        case .text(let s): s.utf8.count
        case .binary(let b): b.count
        }
    }
}

/// Bounds a request may not pass, beyond the line length (the daemon's `local.filter_max_*`).
public struct RequestLimits: Sendable, Equatable {
    /// A filter path's length in bytes.
    public var filterMaxBytes: Int
    /// A filter path's number of dotted components.
    public var filterMaxDepth: Int

    public init(filterMaxBytes: Int = 256, filterMaxDepth: Int = 16) {
        self.filterMaxBytes = filterMaxBytes
        self.filterMaxDepth = filterMaxDepth
    }
}

/// How long a sticky send lasts: until its client disconnects, or until `unstick`.
public enum StickyScope: String, Sendable, Equatable, CaseIterable, Codable {
    case client, daemon
}

/// `"sticky": KEY` on a send: the message goes again after every reconnect.
public struct StickyOptions: Sendable, Equatable {
    public var key: String
    public var scope: StickyScope
    /// Sent once when the key goes (its last holder leaves or unsticks it): an unsubscribe.
    public var onUnstick: String?

    public init(key: String, scope: StickyScope = .client, onUnstick: String? = nil) {
        self.key = key
        self.scope = scope
        self.onUnstick = onUnstick
    }

    /// Longest key, in bytes.
    public static let maxKeyBytes = 256
}

/// A validated request.
public enum Command: Sendable, Equatable {
    /// `stream`: the stream the consumer's `since` belongs to (from `hello`, `status` or a `gap`).
    /// `all`: the wire as it is, with what the application protocol routes to one app or
    /// answers itself (write permission; no filter or since).
    case subscribe(filter: Filter?, since: UInt64?, stream: String?, all: Bool = false)
    case unsubscribe
    case send(Payload, sticky: StickyOptions?)
    /// Lists the sticky keys.
    case sticky
    /// The application protocol's set-aside subscriptions are sent again.
    case clearSetAside
    /// `scope` nil: this client's own hold if it has one, else the daemon-scope hold.
    case unstick(key: String, text: String?, scope: StickyScope?)
    case status
    case metrics
    case close(code: UInt16, reason: String)
    case connect
    case reconnect
    /// `match` nil: answered by the application protocol's id (`upstream.protocol`).
    case request(Payload, match: Filter?, timeout: Duration)

    public var op: Op {
        switch self {
        case .subscribe: .subscribe
        case .unsubscribe: .unsubscribe
        case .send: .send
        case .status: .status
        case .metrics: .metrics
        case .close: .close
        case .connect: .connect
        case .reconnect: .reconnect
        case .request: .request
        case .sticky: .sticky
        case .clearSetAside: .clearSetAside
        case .unstick: .unstick
        }
    }
}

/// One request line: `{"id": ..., "op": "...", ...}`.
public struct Request: Sendable, Equatable {
    public var id: JSONValue?
    public var command: Command

    public init(id: JSONValue?, command: Command) {
        self.id = id
        self.command = command
    }

    /// Reads a parsed line through the request's schema (its `Codable` conformance, below: the
    /// coder the replies use) and checks it against the daemon's bounds. Every error names the
    /// field and what is accepted.
    public static func decode(_ json: JSONValue, limits: RequestLimits = RequestLimits()) throws(ProtocolError) -> Request {
        guard case .object = json else {
            throw ProtocolError(.notAnObject, "a request must be a JSON object like {\"id\":1,\"op\":\"status\"}, not \(json.typeName)")
        }
        let request: Request
        do {
            request = try WireDecoder(json, codingPath: []).decodeValue(Request.self)
        } catch let error as ProtocolError {
            throw error
        } catch {
            // `init(from:)` words its own errors; anything else is a bug in it.
            throw ProtocolError(.internalError, "bug: a request was refused with \(error)", id: json["id"])
        }
        do {
            try request.command.check(limits)
        } catch {
            throw error.with(id: request.id)
        }
        return request
    }

    /// The request line: `{"id": ..., "op": ..., "v": 1, ...fields}`, as `decode` reads it.
    package var json: JSONValue { WireCoding.encode(self) }
}

/// The request's schema, both ways: every field once (`Field`), read by `init(from:)` and
/// written by `encode(to:)` (a test holds every command to a round trip). Through `WireCoding`, a
/// field of the wrong type is worded for the client (`"since" must be a whole number >= 0, not
/// -1`); the checks of values follow each op's fields.
extension Request: Codable {
    private enum Field: String, CodingKey {
        case id, op, v, text, binary, filter, since, stream, all, key, scope, sticky, code, reason, match, timeout
        case onUnstick = "on_unstick"
    }

    private typealias Fields = KeyedDecodingContainer<Field>

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Field.self)
        let id = try c.decodeIfPresent(JSONValue.self, forKey: .id)
        if let id {
            switch id {
            case .string, .number: break
            default: throw ProtocolError(.wrongType, "\"id\" must be a string or a number, not \(id.typeName)")
            }
        }
        do {
            self.init(id: id, command: try Self.command(c))
        } catch let error as ProtocolError {
            throw error.with(id: id)
        } catch let error as WireDecodingError {
            throw ProtocolError(error, id: id)
        }
    }

    private static func command(_ c: Fields) throws -> Command {
        if let v = try c.decodeIfPresent(JSONValue.self, forKey: .v), v.intValue != WireProtocol.version {
            throw ProtocolError(
                .badVersion,
                "protocol version \(v.serialized) is not supported: this daemon speaks version \(WireProtocol.version); upgrade the client or omit \"v\"")
        }
        guard let name = try c.decodeIfPresent(String.self, forKey: .op) else {
            throw ProtocolError(.missingField, "missing \"op\": one of \(Op.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        guard let op = Op(rawValue: name) else {
            throw ProtocolError(.unknownOp, "unknown op \"\(name)\": use one of \(Op.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        switch op {
        case .subscribe:
            let filter = try c.decodeIfPresent(Filter.self, forKey: .filter)
            let since = try c.decodeIfPresent(UInt64.self, forKey: .since)
            let stream = try c.decodeIfPresent(String.self, forKey: .stream)
            if stream != nil && since == nil {
                throw ProtocolError(.missingField, "\"stream\" goes with \"since\": give the last seq you received in that stream")
            }
            let all = try c.decodeIfPresent(Bool.self, forKey: .all) ?? false
            if all && since != nil {
                throw ProtocolError(.invalidValue, "\"all\" shows the live wire as it is, with nothing replayed: leave out \"since\"")
            }
            return .subscribe(filter: filter, since: since, stream: stream, all: all)
        case .unsubscribe: return .unsubscribe
        case .status: return .status
        case .metrics: return .metrics
        case .connect: return .connect
        case .reconnect: return .reconnect
        case .sticky: return .sticky
        case .clearSetAside: return .clearSetAside
        case .send: return .send(try Self.payload(c, op: op), sticky: try Self.sticky(c))
        case .unstick:
            guard let key = try c.decodeIfPresent(String.self, forKey: .key) else {
                throw ProtocolError(.missingField, "unstick needs \"key\": the sticky key to remove")
            }
            return .unstick(key: key, text: try c.decodeIfPresent(String.self, forKey: .text), scope: try Self.scope(c))
        case .close:
            let code = try c.decodeIfPresent(UInt64.self, forKey: .code).map { UInt16(clamping: $0) } ?? 1000
            guard code == 1000 || code == 1001 || (3000...4999).contains(code) else {
                throw ProtocolError(.invalidValue, "\"code\" \(code) cannot be sent: use 1000 (normal), 1001 (going away) or 3000-4999")
            }
            let reason = try c.decodeIfPresent(String.self, forKey: .reason) ?? ""
            guard reason.utf8.count <= 123 else {
                throw ProtocolError(.invalidValue, "\"reason\" is \(reason.utf8.count) bytes: a close reason holds at most 123 bytes of UTF-8")
            }
            return .close(code: code, reason: reason)
        case .request:
            let payload = try Self.payload(c, op: op)
            let match = try c.decodeIfPresent(Filter.self, forKey: .match)
            let seconds = try c.decodeIfPresent(Double.self, forKey: .timeout) ?? 10
            guard seconds > 0, seconds <= 3600 else {
                let got = seconds == seconds.rounded() && abs(seconds) < 1e15 ? String(Int64(seconds)) : "\(seconds)"
                throw ProtocolError(.invalidValue, "\"timeout\" must be more than 0 and at most 3600 seconds, got \(got)")
            }
            return .request(payload, match: match, timeout: .nanoseconds(Int64(seconds * 1e9)))
        }
    }

    /// `text` (a string) or `binary` (base64), exactly one.
    private static func payload(_ c: Fields, op: Op) throws -> Payload {
        switch (try c.decodeIfPresent(String.self, forKey: .text), try c.decodeIfPresent(String.self, forKey: .binary)) {
        case (let text?, nil):
            return .text(text)
        case (nil, let binary?):
            guard let bytes = try? Base64.decode(string: binary) else {
                throw ProtocolError(.invalidValue, "\"binary\" is not valid base64: encode the bytes with standard base64 (RFC 4648)")
            }
            return .binary(bytes)
        case (nil, nil):
            throw ProtocolError(.missingField, "\(op.rawValue) needs \"text\" (a string) or \"binary\" (base64)")
        case (_?, _?):
            throw ProtocolError(.invalidValue, "give either \"text\" or \"binary\", not both")
        }
    }

    /// `"scope": "client" | "daemon"`, or nil.
    private static func scope(_ c: Fields) throws -> StickyScope? {
        guard let name = try c.decodeIfPresent(String.self, forKey: .scope) else { return nil }
        guard let scope = StickyScope(rawValue: name) else {
            throw ProtocolError(
                .invalidValue,
                "\"scope\" must be \"client\" (ends with this connection, the default) or \"daemon\" (lasts until unstick), not \"\(name)\"")
        }
        return scope
    }

    /// `"sticky": KEY` with optional `"scope"` and `"on_unstick"`, or nil for a plain send.
    private static func sticky(_ c: Fields) throws -> StickyOptions? {
        guard let key = try c.decodeIfPresent(String.self, forKey: .sticky) else {
            if c.contains(.scope) || c.contains(.onUnstick) {
                throw ProtocolError(.missingField, "\"scope\" and \"on_unstick\" go with \"sticky\": name the key, as in \"sticky\":\"trades\"")
            }
            return nil
        }
        guard !key.isEmpty, key.utf8.count <= StickyOptions.maxKeyBytes else {
            throw ProtocolError(.invalidValue, "\"sticky\" must be a key of 1 to \(StickyOptions.maxKeyBytes) bytes, such as \"trades.BTC\"")
        }
        return StickyOptions(key: key, scope: try Self.scope(c) ?? .client, onUnstick: try c.decodeIfPresent(String.self, forKey: .onUnstick))
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Field.self)
        if let id = self.id { try c.encode(id, forKey: .id) }
        try c.encode(self.command.op.rawValue, forKey: .op)
        try c.encode(WireProtocol.version, forKey: .v)
        func payload(_ payload: Payload) throws {
            switch payload {
            case .text(let text): try c.encode(text, forKey: .text)
            case .binary(let bytes): try c.encode(Base64.encodeToString(bytes: bytes), forKey: .binary)
            }
        }
        switch self.command {
        case .subscribe(let filter, let since, let stream, let all):
            if let filter { try c.encode(filter, forKey: .filter) }
            if let since { try c.encode(since, forKey: .since) }
            if let stream { try c.encode(stream, forKey: .stream) }
            if all { try c.encode(true, forKey: .all) }
        case .unsubscribe, .status, .metrics, .connect, .reconnect, .sticky, .clearSetAside:
            break
        case .send(let message, let sticky):
            try payload(message)
            if let sticky {
                try c.encode(sticky.key, forKey: .sticky)
                try c.encode(sticky.scope.rawValue, forKey: .scope)
                if let leave = sticky.onUnstick { try c.encode(leave, forKey: .onUnstick) }
            }
        case .unstick(let key, let text, let scope):
            try c.encode(key, forKey: .key)
            if let text { try c.encode(text, forKey: .text) }
            if let scope { try c.encode(scope.rawValue, forKey: .scope) }
        case .close(let code, let reason):
            try c.encode(code, forKey: .code)
            try c.encode(reason, forKey: .reason)
        case .request(let message, let match, let timeout):
            try payload(message)
            try c.encode(Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18, forKey: .timeout)
            if let match { try c.encode(match, forKey: .match) }
        }
    }
}

extension Command {
    /// The values against the daemon's bounds (`local.filter_max_*`): what the schema cannot
    /// know.
    func check(_ limits: RequestLimits) throws(ProtocolError) {
        switch self {
        case .subscribe(let filter?, _, _, _): try filter.check(as: "filter", limits)
        case .request(_, let match?, _): try match.check(as: "match", limits)
        default: break
        }
    }
}

extension Filter {
    /// A subscribe's `filter` or a request's `match`, as the client gave it.
    func check(as name: String, _ limits: RequestLimits) throws(ProtocolError) {
        if let test = self.wholeText {
            let (key, text) =
                switch test {
                case .prefix(let text): ("prefix", text)
                case .contains(let text): ("contains", text)
                }
            guard name == "filter" else {
                throw ProtocolError(.invalidValue, "\"\(name)\" takes a field: {\"field\": \"id\", \"equals\": 7}; \"\(key)\" is for a subscribe's filter")
            }
            guard !text.isEmpty else { throw ProtocolError(.wrongType, "\"\(name).\(key)\" must be a non-empty string") }
            guard text.utf8.count <= limits.filterMaxBytes else {
                throw ProtocolError(
                    .invalidValue, "\"\(name).\(key)\" is \(text.utf8.count) bytes long: at most \(limits.filterMaxBytes) (local.filter_max_bytes)")
            }
            return
        }
        guard !self.field.isEmpty else {
            throw ProtocolError(.missingField, "\"\(name)\" needs \"field\": a dotted path such as \"type\" or \"data.symbol\"")
        }
        let bytes = self.field.utf8.count
        guard bytes <= limits.filterMaxBytes else {
            throw ProtocolError(
                .invalidValue,
                "\"\(name).field\" is \(bytes) bytes long: a path may be at most \(limits.filterMaxBytes) bytes (local.filter_max_bytes)")
        }
        guard self.path.count <= limits.filterMaxDepth else {
            throw ProtocolError(
                .invalidValue,
                "\"\(name).field\" has \(self.path.count) parts: a path may have at most \(limits.filterMaxDepth) (local.filter_max_depth)")
        }
    }
}

extension ProtocolError {
    /// The same error, as the reply to the request with this id.
    func with(id: JSONValue?) -> ProtocolError {
        var error = self
        error.id = id
        return error
    }

    /// A request field of the wrong type, worded for the client: `"since" must be a whole
    /// number >= 0, not -1`, `"filter" must be an object like {...}, not string`.
    init(_ error: WireDecodingError, id: JSONValue?) {
        guard let mismatch = error.mismatch else {
            self.init(.invalidValue, error.description, id: id)
            return
        }
        // A number's own text says why it is not a whole number >= 0 (-1, 1.5); else its type.
        let found = if case .wholeNumber = mismatch.expected { mismatch.found.serialized } else { mismatch.found.typeName }
        let example = error.path == "filter" || error.path == "match" ? #" like {"field": "type", "equals": "trade"}"# : ""
        self.init(.wrongType, "\"\(error.path)\" must be \(mismatch.expected)\(example), not \(found)", id: id)
    }
}
