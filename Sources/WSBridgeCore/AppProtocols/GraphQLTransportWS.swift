import WSBridgeProtocol

/// graphql-transport-ws (the `graphql-ws` library's protocol): `connection_init` →
/// `connection_ack`; `subscribe` {id, payload} answered by `next`/`error`/`complete` with that
/// id; `complete` from the client ends an operation; `ping`/`pong` both ways. Ids are the
/// client's strings, unique per connection: a duplicate is closed with 4409.
package struct GraphQLTransportWS: AppProtocolCodec {
    /// The daemon's link sends connection_init (`connection`), not the protocol layer.
    package init(settings: Configuration.ApplicationProtocol) {}

    package init() {}

    /// connection_init (with `[protocol] init_payload`) opens it; connection_ack is the gate.
    package static func connection(_ settings: Configuration.ApplicationProtocol) -> AppProtocolConnection {
        let payload = settings.initPayload.map { ",\"payload\":\($0)" } ?? ""
        return AppProtocolConnection(
            opening: "{\"type\":\"connection_init\"\(payload)}", readyWhen: Filter(parsing: "type=connection_ack"), subprotocol: "graphql-transport-ws")
    }

    package var name: String { "graphql-transport-ws" }

    package func wireID(_ n: UInt64) -> WireID { WireID(.string(String(n))) }

    package func classify(fromApp message: JSONValue) -> AppOp {
        guard let type = message["type"]?.stringValue else { return .invalid("a graphql-transport-ws message needs a \"type\"") }
        switch type {
        case "connection_init": return .handshake
        case "ping": return .ping
        case "pong": return .swallow
        case "subscribe":
            guard let id = message["id"], case .string = id else { return .invalid("subscribe needs a string \"id\"") }
            guard let payload = message["payload"], case .object = payload else { return .invalid("subscribe needs a \"payload\" object") }
            // Only subscriptions last; a query or a mutation is one call with its answers.
            if Self.isSubscription(payload["query"]?.stringValue ?? "", operationName: payload["operationName"]?.stringValue) {
                return .subscribe(id: WireID(id), key: Self.subscriptionKey(payload))
            }
            return .call(id: WireID(id))
        case "complete":
            guard let id = message["id"], case .string = id else { return .invalid("complete needs a string \"id\"") }
            return .unsubscribe(id: nil, target: WireID(id))
        default:
            return .other
        }
    }

    package func classify(fromUpstream message: JSONValue) -> UpstreamOp {
        switch message["type"]?.stringValue {
        case "connection_ack": return .ack
        case "ping": return .ping
        case "pong": return .swallow
        case "next":
            guard let id = message["id"] else { return .broadcast }
            return .answer(id: WireID(id), final: false)
        case "error", "complete":
            guard let id = message["id"] else { return .broadcast }
            return .answer(id: WireID(id), final: true)
        default: return .broadcast
        }
    }

    package func replacingID(in message: JSONValue, with id: WireID) -> JSONValue { message.setting("id", to: id.json) }

    package func handshakeAnswer(acknowledgement: JSONValue?) -> JSONValue { acknowledgement ?? ["type": "connection_ack"] }

    package func pong(to ping: JSONValue) -> JSONValue? {
        var pong: JSONValue = ["type": "pong"]
        if let payload = ping["payload"] { pong = pong.setting("payload", to: payload) }
        return pong
    }

    package func endMessage(upstreamID: WireID, serverID: WireID?, callID: WireID) -> JSONValue? {
        ["type": "complete", "id": upstreamID.json]
    }

    package func linkLostAnswer(id: WireID, reason: String) -> JSONValue {
        ["type": "error", "id": id.json, "payload": [["message": .string("wsbridged: \(reason)")]]]
    }

    /// Two apps' subscribes are one subscription when they run the same operation: the key is
    /// the payload with its document's ignored tokens dropped (whitespace, commas, comments: gql
    /// prints a document on many lines, another app writes it on one) and its objects' keys in
    /// order.
    static func subscriptionKey(_ payload: JSONValue) -> String {
        var canonical = Self.sortedKeys(payload)
        if let query = payload["query"]?.stringValue { canonical = canonical.setting("query", to: .string(Self.compact(query))) }
        return canonical.serialized
    }

    private static func sortedKeys(_ value: JSONValue) -> JSONValue {
        switch value {
        case .object(let members): .object(members.map { ($0.0, Self.sortedKeys($0.1)) }.sorted { $0.0 < $1.0 })
        case .array(let items): .array(items.map(Self.sortedKeys))
        default: value
        }
    }

    /// A GraphQL document without its ignored tokens (spec 2.1.7): whitespace, line ends, commas
    /// and comments, outside strings; one space kept only between two names or numbers.
    static func compact(_ document: String) -> String {
        var out: [UInt8] = []
        let bytes = Array(document.utf8)
        var i = 0
        var gap = false
        func isWord(_ c: UInt8) -> Bool { c == UInt8(ascii: "_") || (c >= 48 && c <= 57) || (c | 0x20 >= 97 && c | 0x20 <= 122) }
        while i < bytes.count {
            let c = bytes[i]
            switch c {
            case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: ","), 0xEF:
                // 0xEF: a byte-order mark's first byte (EF BB BF), ignored as whitespace is.
                i += c == 0xEF && i + 2 < bytes.count && bytes[i + 1] == 0xBB && bytes[i + 2] == 0xBF ? 3 : 1
                gap = true
                continue
            case UInt8(ascii: "#"):
                while i < bytes.count, bytes[i] != UInt8(ascii: "\n"), bytes[i] != UInt8(ascii: "\r") { i += 1 }
                gap = true
                continue
            case UInt8(ascii: "\""):
                // A string ("…" with escapes, or a block string """…"""), as it is.
                if gap, let last = out.last, isWord(last) { out.append(UInt8(ascii: " ")) }
                gap = false
                let block = i + 2 < bytes.count && bytes[i + 1] == c && bytes[i + 2] == c
                let start = i
                i += block ? 3 : 1
                while i < bytes.count {
                    if block {
                        if bytes[i] == UInt8(ascii: "\\"), i + 3 < bytes.count, bytes[i + 1] == c, bytes[i + 2] == c, bytes[i + 3] == c {
                            i += 4
                            continue
                        }
                        if i + 2 < bytes.count, bytes[i] == c, bytes[i + 1] == c, bytes[i + 2] == c {
                            i += 3
                            break
                        }
                        i += 1
                    } else {
                        if bytes[i] == UInt8(ascii: "\\") {
                            i += 2
                            continue
                        }
                        i += 1
                        if bytes[i - 1] == c || bytes[i - 1] == UInt8(ascii: "\n") { break }
                    }
                }
                out.append(contentsOf: bytes[start..<min(i, bytes.count)])
                continue
            default:
                if gap, let last = out.last, isWord(last), isWord(c) { out.append(UInt8(ascii: " ")) }
                gap = false
                out.append(c)
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Whether the operation a GraphQL document runs is a subscription: the one `operationName`
    /// names, or (nil) its first operation, past fragment definitions, comments and strings.
    static func isSubscription(_ document: String, operationName: String? = nil) -> Bool {
        var scanner = DocumentScanner(Array(document.utf8))
        while let word = scanner.nextDefinition() {
            switch word {
            case "fragment":
                scanner.skipDefinition()
            case "{":
                // A query's short form: anonymous.
                if operationName == nil { return false }
                scanner.skipDefinition()
            case "query", "mutation", "subscription":
                let name = scanner.name()
                if operationName == nil || name == operationName { return word == "subscription" }
                scanner.skipDefinition()
            default:
                return false
            }
        }
        return false
    }
}

/// Just enough of GraphQL's lexical rules to walk a document's definitions.
private struct DocumentScanner {
    let bytes: [UInt8]
    var i = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// Past whitespace, commas, the BOM's bytes and comments.
    mutating func skipIgnored() {
        while i < bytes.count {
            let c = bytes[i]
            if c == UInt8(ascii: "#") {
                while i < bytes.count && bytes[i] != UInt8(ascii: "\n") { i += 1 }
            } else if c == 0x20 || c == 0x09 || c == 0x0A || c == 0x0D || c == UInt8(ascii: ",") || c == 0xEF || c == 0xBB || c == 0xBF {
                i += 1
            } else {
                return
            }
        }
    }

    static func isNameByte(_ c: UInt8) -> Bool {
        (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z")) || (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "Z"))
            || (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9")) || c == UInt8(ascii: "_")
    }

    /// The next definition's first token: a keyword, or "{" (left in place).
    mutating func nextDefinition() -> String? {
        self.skipIgnored()
        guard i < bytes.count else { return nil }
        if bytes[i] == UInt8(ascii: "{") { return "{" }
        return self.name()
    }

    /// A name at the current position (nil if none).
    mutating func name() -> String? {
        self.skipIgnored()
        let start = i
        while i < bytes.count && Self.isNameByte(bytes[i]) { i += 1 }
        return i > start ? String(decoding: bytes[start..<i], as: UTF8.self) : nil
    }

    /// To the end of the current definition: its first selection set, braces matched, strings skipped.
    mutating func skipDefinition() {
        var depth = 0
        while i < bytes.count {
            let c = bytes[i]
            if c == UInt8(ascii: "\"") {
                self.skipString()
                continue
            }
            if c == UInt8(ascii: "#") {
                self.skipIgnored()
                continue
            }
            i += 1
            if c == UInt8(ascii: "{") { depth += 1 }
            if c == UInt8(ascii: "}") {
                depth -= 1
                if depth == 0 { return }
            }
        }
    }

    /// Past a string or a block string.
    mutating func skipString() {
        let quote = UInt8(ascii: "\"")
        if i + 2 < bytes.count && bytes[i + 1] == quote && bytes[i + 2] == quote {
            i += 3
            while i < bytes.count {
                if bytes[i] == UInt8(ascii: "\\") {
                    i += 2
                    continue
                }
                if i + 2 < bytes.count && bytes[i] == quote && bytes[i + 1] == quote && bytes[i + 2] == quote {
                    i += 3
                    return
                }
                i += 1
            }
            return
        }
        i += 1
        while i < bytes.count && bytes[i] != quote {
            i += bytes[i] == UInt8(ascii: "\\") ? 2 : 1
        }
        i += 1
    }
}
