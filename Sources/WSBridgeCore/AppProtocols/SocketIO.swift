import WSBridgeProtocol

/// Socket.IO 5 over Engine.IO 4, WebSocket transport: one packet per WebSocket message.
/// Engine.IO: `0{…}` open (its pingInterval + pingTimeout are the keepalive deadline), `2`/`3`
/// ping and pong (the server pings, the client answers), `1` close. Socket.IO inside `4`:
/// `40` connect (the namespace's, answered `40{"sid":…}`), `41` disconnect, `42[event,…]`
/// event, `43<id>[…]` ack, `44` connect error; a namespace other than "/" follows the type as
/// `/chat,`, an ack id before the JSON. An emit with an ack id is a call: its id is rewritten,
/// and the `43` with that id goes back to its app only.
///
/// The view: `{"type":"event","namespace":"/","event":"ev","args":[…],"id":1}` (`id` only
/// when it has one), `{"type":"ack","namespace":"/","id":1,"args":[…]}`,
/// `{"type":"connect","namespace":"/","data":{…}}`, `{"type":"ping"}`, `{"type":"open","data":{…}}`…
package struct SocketIO: AppProtocolCodec {
    /// The namespace the daemon connects (`[protocol] namespace`).
    package var namespace: String

    package init(settings: Configuration.ApplicationProtocol) {
        self.init(namespace: settings.namespace ?? "/")
    }

    /// The namespace's CONNECT (`40`, with `[protocol] auth`) opens it; its answer is the gate.
    package static func connection(_ settings: Configuration.ApplicationProtocol) -> AppProtocolConnection {
        let namespace = settings.namespace ?? "/"
        let prefix = "40" + (namespace == "/" ? "" : namespace + ",")
        return AppProtocolConnection(opening: prefix + (settings.auth ?? ""), readyWhen: Filter(.prefix(prefix)))
    }

    package init(namespace: String = "/") {
        self.namespace = namespace
    }

    package var name: String { "socketio" }
    package var isText: Bool { true }

    /// An event without an ack id, in the daemon's namespace: `42[` or `42/chat,[`.
    package var broadcastPrefixes: [[UInt8]] { [Array("42\(self.namespace == "/" ? "" : self.namespace + ",")[".utf8)] }

    package func wireID(_ n: UInt64) -> WireID { WireID(.number(JSONNumber(n))) }

    static let engineTypes = ["open", "close", "ping", "pong", "message", "upgrade", "noop"]
    static let socketTypes = ["connect", "disconnect", "event", "ack", "connect_error", "binary_event", "binary_ack"]

    // MARK: - Text

    package func split(_ bytes: ArraySlice<UInt8>) -> Result<(messages: [AppProtocolMessage], consumed: Int), AppProtocolSyntaxError> {
        switch Self.view(of: bytes) {
        case .success(let view): .success(([AppProtocolMessage(text: String(decoding: bytes, as: UTF8.self), view: view)], bytes.count))
        case .failure(let error): .failure(error)
        }
    }

    /// One packet's view.
    static func view(of bytes: ArraySlice<UInt8>) -> Result<JSONValue, AppProtocolSyntaxError> {
        guard let first = bytes.first, first >= UInt8(ascii: "0"), first <= UInt8(ascii: "6") else {
            return .failure(AppProtocolSyntaxError("an Engine.IO packet starts with its type, a digit 0 to 6 (\"42[\\\"event\\\",…]\" for an event)"))
        }
        let engine = Self.engineTypes[Int(first - UInt8(ascii: "0"))]
        var rest = bytes.dropFirst()
        guard engine == "message" else {
            var view: JSONValue = ["type": .string(engine)]
            if !rest.isEmpty {
                if engine == "open", let data = try? JSONValue.parse(rest) {
                    view = view.setting("data", to: data)
                } else {
                    view = view.setting("data", to: .string(String(decoding: rest, as: UTF8.self)))
                }
            }
            return .success(view)
        }
        guard let kind = rest.first, kind >= UInt8(ascii: "0"), kind <= UInt8(ascii: "6") else {
            return .failure(AppProtocolSyntaxError("a Socket.IO packet is 4 and its type, a digit 0 to 6 (\"42[\\\"event\\\",…]\" for an event)"))
        }
        let type = Self.socketTypes[Int(kind - UInt8(ascii: "0"))]
        rest = rest.dropFirst()
        if type == "binary_event" || type == "binary_ack" {
            return .failure(AppProtocolSyntaxError("binary Socket.IO packets (attachments) are not supported: send the data as JSON"))
        }
        var namespace = "/"
        if rest.first == UInt8(ascii: "/") {
            let end = rest.firstIndex(of: UInt8(ascii: ",")) ?? rest.endIndex
            namespace = String(decoding: rest[rest.startIndex..<end], as: UTF8.self)
            rest = end < rest.endIndex ? rest[(end + 1)...] : rest[end...]
        }
        var id: UInt64?
        while let c = rest.first, c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") {
            let (n, overflow) = (id ?? 0).multipliedReportingOverflow(by: 10)
            guard !overflow else { return .failure(AppProtocolSyntaxError("the ack id is too long")) }
            id = n + UInt64(c - UInt8(ascii: "0"))
            rest = rest.dropFirst()
        }
        var payload: JSONValue?
        if !rest.isEmpty {
            do {
                payload = try JSONValue.parse(rest)
            } catch {
                return .failure(AppProtocolSyntaxError("the Socket.IO packet's data is not JSON: \(error)"))
            }
        }
        var view: JSONValue = ["type": .string(type), "namespace": .string(namespace)]
        if let id { view = view.setting("id", to: .number(JSONNumber(id))) }
        switch type {
        case "event":
            guard case .array(let items)? = payload, let event = items.first, case .string = event else {
                return .failure(AppProtocolSyntaxError("a Socket.IO event's data is an array whose first item is the event's name: 42[\"name\",…]"))
            }
            view = view.setting("event", to: event).setting("args", to: .array(Array(items.dropFirst())))
        case "ack":
            guard id != nil, case .array? = payload else {
                return .failure(AppProtocolSyntaxError("a Socket.IO ack carries its id and an array: 43<id>[…]"))
            }
            view = view.setting("args", to: payload!)
        default:
            if let payload { view = view.setting("data", to: payload) }
        }
        return .success(view)
    }

    package func wireText(_ view: JSONValue) -> String {
        guard let type = view["type"]?.stringValue else { return view.serialized }
        if let engine = Self.engineTypes.firstIndex(of: type), type != "message" {
            switch view["data"] {
            case .string(let s)?: return "\(engine)\(s)"
            case let data?: return "\(engine)\(data.serialized)"
            case nil: return "\(engine)"
            }
        }
        guard let kind = Self.socketTypes.firstIndex(of: type) else { return view.serialized }
        var out = "4\(kind)"
        if let namespace = view["namespace"]?.stringValue, namespace != "/" { out += namespace + "," }
        if let id = view["id"], id != .null { out += id.serialized }
        switch type {
        case "event":
            var items: [JSONValue] = [view["event"] ?? .string("")]
            if case .array(let args)? = view["args"] { items += args }
            out += JSONValue.array(items).serialized
        case "ack":
            out += (view["args"] ?? .array([])).serialized
        default:
            if let data = view["data"] { out += data.serialized }
        }
        return out
    }

    // MARK: - Ids

    package func classify(fromApp message: JSONValue) -> AppOp {
        switch message["type"]?.stringValue {
        case "connect": return .handshake
        case "ping": return .ping
        case "pong", "disconnect", "close", "noop": return .swallow
        case "event":
            guard let id = message["id"] else { return .other }
            return .call(id: WireID(id))
        case "ack": return .other
        default: return .invalid("send a Socket.IO event (42[\"name\",…], or 42<ack id>[…] for an answer) or an ack (43<id>[…])")
        }
    }

    package func classify(fromUpstream message: JSONValue) -> UpstreamOp {
        switch message["type"]?.stringValue {
        case "open": return .open
        case "ping": return .ping
        case "pong", "noop": return .swallow
        case "connect": return .ack
        case "ack":
            guard let id = message["id"] else { return .broadcast }
            return .answer(id: WireID(id), final: true)
        case "disconnect":
            return .error("the server disconnected namespace \(message["namespace"]?.stringValue ?? "/") (41)", fatal: true)
        case "connect_error":
            let data = message["data"].map { ": " + ($0["message"]?.stringValue ?? $0.serialized) } ?? ""
            return .error("the server refused namespace \(message["namespace"]?.stringValue ?? "/") (44)\(data)", fatal: true)
        case "close":
            return .error("the server closed the Engine.IO session (1)", fatal: true)
        default: return .broadcast
        }
    }

    package func timing(in message: JSONValue) -> AppProtocolTiming? {
        guard message["type"]?.stringValue == "open", let interval = message["data"]?["pingInterval"]?.intValue,
            let timeout = message["data"]?["pingTimeout"]?.intValue
        else { return nil }
        // The server pings every interval; it gives up on a client after interval + timeout, and
        // so does the daemon on a server that stopped pinging.
        return AppProtocolTiming(deadline: Int64(interval + timeout))
    }

    package func replacingID(in message: JSONValue, with id: WireID) -> JSONValue { message.setting("id", to: id.json) }

    package func handshakeAnswer(acknowledgement: JSONValue?) -> JSONValue {
        acknowledgement ?? ["type": "connect", "namespace": .string(self.namespace), "data": [:]]
    }

    package func pong(to ping: JSONValue) -> JSONValue? {
        var pong: JSONValue = ["type": "pong"]
        if let data = ping["data"] { pong = pong.setting("data", to: data) }
        return pong
    }

    package func endMessage(upstreamID: WireID, serverID: WireID?, callID: WireID) -> JSONValue? { nil }
    package func linkLostAnswer(id: WireID, reason: String) -> JSONValue {
        ["type": "ack", "namespace": .string(self.namespace), "id": id.json, "args": [["error": .string("wsbridged: \(reason)")]]]
    }
}
