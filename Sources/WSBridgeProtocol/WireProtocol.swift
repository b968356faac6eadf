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

    /// Validates a parsed line. Every error names the field and what is accepted.
    public static func decode(_ json: JSONValue, limits: RequestLimits = RequestLimits()) throws(ProtocolError) -> Request {
        guard case .object = json else {
            throw ProtocolError(.notAnObject, "a request must be a JSON object like {\"id\":1,\"op\":\"status\"}, not \(json.typeName)")
        }
        let id = json["id"]
        if let id {
            switch id {
            case .string, .number, .null: break
            default: throw ProtocolError(.wrongType, "\"id\" must be a string or a number, not \(id.typeName)", id: nil)
            }
        }
        func fail(_ code: ErrorCode, _ message: String) -> ProtocolError { ProtocolError(code, message, id: id) }
        if let v = json["v"] {
            guard v.intValue == WireProtocol.version else {
                throw fail(
                    .badVersion,
                    "protocol version \(v.serialized) is not supported: this daemon speaks version \(WireProtocol.version); upgrade the client or omit \"v\"")
            }
        }
        guard let opValue = json["op"] else {
            throw fail(.missingField, "missing \"op\": one of \(Op.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        guard let opName = opValue.stringValue else {
            throw fail(.wrongType, "\"op\" must be a string, not \(opValue.typeName)")
        }
        guard let op = Op(rawValue: opName) else {
            throw fail(.unknownOp, "unknown op \"\(opName)\": use one of \(Op.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        let fields = FieldReader(json: json, id: id, op: op, limits: limits)
        let command: Command
        switch op {
        case .subscribe:
            let filter = try fields.filter("filter", required: false)
            let since = try fields.unsigned("since")
            let stream = try fields.string("stream")
            if stream != nil && since == nil {
                throw fail(.missingField, "\"stream\" goes with \"since\": give the last seq you received in that stream")
            }
            let all = try fields.bool("all") ?? false
            if all && since != nil {
                throw fail(.invalidValue, "\"all\" shows the live wire as it is, with nothing replayed: leave out \"since\"")
            }
            command = .subscribe(filter: filter, since: since, stream: stream, all: all)
        case .unsubscribe:
            command = .unsubscribe
        case .status:
            command = .status
        case .metrics:
            command = .metrics
        case .connect:
            command = .connect
        case .reconnect:
            command = .reconnect
        case .send:
            command = .send(try fields.payload(), sticky: try fields.sticky())
        case .sticky:
            command = .sticky
        case .clearSetAside:
            command = .clearSetAside
        case .unstick:
            guard let key = try fields.string("key") else { throw fail(.missingField, "unstick needs \"key\": the sticky key to remove") }
            command = .unstick(key: key, text: try fields.string("text"), scope: try fields.scope())
        case .close:
            let code = try fields.unsigned("code").map { UInt16(clamping: $0) } ?? 1000
            guard code == 1000 || code == 1001 || (3000...4999).contains(code) else {
                throw fail(.invalidValue, "\"code\" \(code) cannot be sent: use 1000 (normal), 1001 (going away) or 3000-4999")
            }
            let reason = try fields.string("reason") ?? ""
            guard reason.utf8.count <= 123 else {
                throw fail(.invalidValue, "\"reason\" is \(reason.utf8.count) bytes: a close reason holds at most 123 bytes of UTF-8")
            }
            command = .close(code: code, reason: reason)
        case .request:
            let payload = try fields.payload()
            let match = try fields.filter("match", required: false)
            let seconds = try fields.number("timeout") ?? 10
            guard seconds > 0, seconds <= 3600 else {
                let got = seconds == seconds.rounded() && abs(seconds) < 1e15 ? String(Int64(seconds)) : "\(seconds)"
                throw fail(.invalidValue, "\"timeout\" must be more than 0 and at most 3600 seconds, got \(got)")
            }
            command = .request(payload, match: match, timeout: .nanoseconds(Int64(seconds * 1e9)))
        }
        return Request(id: id, command: command)
    }
}

private struct FieldReader {
    let json: JSONValue
    let id: JSONValue?
    let op: Op
    let limits: RequestLimits

    func fail(_ code: ErrorCode, _ message: String) -> ProtocolError { ProtocolError(code, message, id: self.id) }

    func string(_ name: String) throws(ProtocolError) -> String? {
        guard let v = self.json[name], v != .null else { return nil }
        guard let s = v.stringValue else { throw self.fail(.wrongType, "\"\(name)\" must be a string, not \(v.typeName)") }
        return s
    }

    func bool(_ name: String) throws(ProtocolError) -> Bool? {
        guard let v = self.json[name], v != .null else { return nil }
        guard let b = v.boolValue else { throw self.fail(.wrongType, "\"\(name)\" must be true or false, not \(v.typeName)") }
        return b
    }

    func number(_ name: String) throws(ProtocolError) -> Double? {
        guard let v = self.json[name], v != .null else { return nil }
        guard let d = v.doubleValue else { throw self.fail(.wrongType, "\"\(name)\" must be a number, not \(v.typeName)") }
        return d
    }

    func unsigned(_ name: String) throws(ProtocolError) -> UInt64? {
        guard let v = self.json[name], v != .null else { return nil }
        guard let i = v.intValue, i >= 0 else {
            throw self.fail(.wrongType, "\"\(name)\" must be a whole number >= 0, not \(v.serialized)")
        }
        return UInt64(i)
    }

    /// `text` (a string) or `binary` (base64), exactly one.
    func payload() throws(ProtocolError) -> Payload {
        let text = try self.string("text")
        let binary = try self.string("binary")
        switch (text, binary) {
        case (let t?, nil):
            return .text(t)
        case (nil, let b?):
            do {
                return .binary(try Base64.decode(string: b))
            } catch {
                throw self.fail(.invalidValue, "\"binary\" is not valid base64: encode the bytes with standard base64 (RFC 4648)")
            }
        case (nil, nil):
            throw self.fail(.missingField, "\(self.op.rawValue) needs \"text\" (a string) or \"binary\" (base64)")
        case (_?, _?):
            throw self.fail(.invalidValue, "give either \"text\" or \"binary\", not both")
        }
    }

    /// `"scope": "client" | "daemon"`, or nil.
    func scope() throws(ProtocolError) -> StickyScope? {
        guard let s = try self.string("scope") else { return nil }
        guard let scope = StickyScope(rawValue: s) else {
            throw self.fail(
                .invalidValue,
                "\"scope\" must be \"client\" (ends with this connection, the default) or \"daemon\" (lasts until unstick), not \"\(s)\"")
        }
        return scope
    }

    /// `"sticky": KEY` with optional `"scope"` and `"on_unstick"`, or nil for a plain send.
    func sticky() throws(ProtocolError) -> StickyOptions? {
        guard let key = try self.string("sticky") else {
            if self.json["scope"] != nil || self.json["on_unstick"] != nil {
                throw self.fail(.missingField, "\"scope\" and \"on_unstick\" go with \"sticky\": name the key, as in \"sticky\":\"trades\"")
            }
            return nil
        }
        guard !key.isEmpty, key.utf8.count <= StickyOptions.maxKeyBytes else {
            throw self.fail(.invalidValue, "\"sticky\" must be a key of 1 to \(StickyOptions.maxKeyBytes) bytes, such as \"trades.BTC\"")
        }
        return StickyOptions(key: key, scope: try self.scope() ?? .client, onUnstick: try self.string("on_unstick"))
    }

    /// `{"field": "a.b", "equals": <any JSON>}`; `equals` may be left out (the field must exist).
    func filter(_ name: String, required: Bool) throws(ProtocolError) -> Filter? {
        guard let v = self.json[name], v != .null else {
            if required { throw self.fail(.missingField, "missing \"\(name)\": {\"field\": \"path.to.field\", \"equals\": value}") }
            return nil
        }
        guard case .object = v else {
            throw self.fail(.wrongType, "\"\(name)\" must be an object like {\"field\": \"type\", \"equals\": \"trade\"}, not \(v.typeName)")
        }
        for key in ["prefix", "contains"] {
            guard let t = v[key] else { continue }
            guard name == "filter" else {
                throw self.fail(.invalidValue, "\"\(name)\" takes a field: {\"field\": \"id\", \"equals\": 7}; \"\(key)\" is for a subscribe's filter")
            }
            guard let text = t.stringValue, !text.isEmpty else { throw self.fail(.wrongType, "\"\(name).\(key)\" must be a non-empty string") }
            guard text.utf8.count <= self.limits.filterMaxBytes else {
                throw self.fail(
                    .invalidValue,
                    "\"\(name).\(key)\" is \(text.utf8.count) bytes long: at most \(self.limits.filterMaxBytes) (local.filter_max_bytes)")
            }
            return Filter(key == "prefix" ? .prefix(text) : .contains(text))
        }
        guard let field = v["field"]?.stringValue, !field.isEmpty else {
            throw self.fail(.missingField, "\"\(name)\" needs \"field\": a dotted path such as \"type\" or \"data.symbol\"")
        }
        let bytes = field.utf8.count
        guard bytes <= self.limits.filterMaxBytes else {
            throw self.fail(
                .invalidValue,
                "\"\(name).field\" is \(bytes) bytes long: a path may be at most \(self.limits.filterMaxBytes) bytes (local.filter_max_bytes)"
            )
        }
        let filter = Filter(field: field, equals: v["equals"])
        guard filter.path.count <= self.limits.filterMaxDepth else {
            throw self.fail(
                .invalidValue,
                "\"\(name).field\" has \(filter.path.count) parts: a path may have at most \(self.limits.filterMaxDepth) (local.filter_max_depth)"
            )
        }
        return filter
    }
}

extension Command {
    /// The request's fields after `op`, as `Request.decode` reads them: one schema, both ways
    /// (a test holds every command to its decode).
    package var fields: [(String, JSONValue)] {
        switch self {
        case .subscribe(let filter, let since, let stream, let all):
            var fields: [(String, JSONValue)] = []
            if let filter { fields.append(("filter", filter.json)) }
            if let since { fields.append(("since", .number(JSONNumber(since)))) }
            if let stream { fields.append(("stream", .string(stream))) }
            if all { fields.append(("all", true)) }
            return fields
        case .unsubscribe, .status, .metrics, .connect, .reconnect, .sticky, .clearSetAside:
            return []
        case .send(let payload, let sticky):
            guard let sticky else { return payload.fields }
            var fields = payload.fields + [("sticky", .string(sticky.key)), ("scope", .string(sticky.scope.rawValue))]
            if let leave = sticky.onUnstick { fields.append(("on_unstick", .string(leave))) }
            return fields
        case .unstick(let key, let text, let scope):
            var fields: [(String, JSONValue)] = [("key", .string(key))]
            if let text { fields.append(("text", .string(text))) }
            if let scope { fields.append(("scope", .string(scope.rawValue))) }
            return fields
        case .close(let code, let reason):
            return [("code", .number(JSONNumber(UInt64(code)))), ("reason", .string(reason))]
        case .request(let payload, let match, let timeout):
            var fields = payload.fields + [("timeout", .number(JSONNumber(Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18)))]
            if let match { fields.append(("match", match.json)) }
            return fields
        }
    }
}

extension Request {
    /// The request line: `{"id": ..., "op": ..., "v": 1, ...fields}`.
    package var json: JSONValue {
        let head: [(String, JSONValue)] =
            (self.id.map { [("id", $0)] } ?? []) + [("op", .string(self.command.op.rawValue)), ("v", .number(JSONNumber(WireProtocol.version)))]
        return .object(head + self.command.fields)
    }
}

extension Payload {
    /// The payload as request fields (`text` or `binary`).
    public var fields: [(String, JSONValue)] {
        switch self {
        case .text(let t): [("text", .string(t))]
        case .binary(let b): [("binary", .string(Base64.encodeToString(bytes: b)))]
        }
    }
}
