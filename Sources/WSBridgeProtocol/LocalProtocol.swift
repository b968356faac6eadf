import ExtrasBase64

/// The local plane's newline-delimited JSON protocol, version 1 (docs/protocol.md).
public enum LocalProtocol {
    public static let version = 1
    /// The default socket path.
    public static let defaultSocket = "/run/wsbridged/wsbridged.sock"
}

/// Operations a client may request.
public enum Op: String, Sendable, CaseIterable {
    case subscribe, unsubscribe, send, status, metrics, close, connect, reconnect, request, sticky, unstick, clients
    case clearSetAside = "clear_set_aside"

    /// Whether the op changes the link (needs write permission).
    public var writes: Bool {
        switch self {
        case .subscribe, .unsubscribe, .status, .metrics, .sticky, .clients: false
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
    /// Every local client: its subscription, what it was sent, what waits for it, its drops.
    case clients
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
        case .clients: .clients
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
            request = try JSONValueDecoder(json, codingPath: []).decodeValue(Request.self)
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
    package var json: JSONValue { JSONValueCoding.encode(self) }
}

/// The request's schema, both ways: every field once (`Field`), read by `init(from:)` and
/// written by `encode(to:)` (a test holds every command to a round trip). Through `JSONValueCoding`, a
/// field of the wrong type is worded for the client (`"since" must be a whole number >= 0, not
/// -1`); the checks of values follow each op's fields.
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
    init(_ error: JSONValueDecodingError, id: JSONValue?) {
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
