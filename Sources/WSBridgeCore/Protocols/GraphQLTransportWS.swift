import WSBridgeProtocol

/// graphql-transport-ws (the `graphql-ws` library's protocol): `connection_init` →
/// `connection_ack`; `subscribe` {id, payload} answered by `next`/`error`/`complete` with that
/// id; `complete` from the client ends an operation; `ping`/`pong` both ways. Ids are the
/// client's strings, unique per connection: a duplicate is closed with 4409.
package struct GraphQLTransportWS: ProtocolCodec {
    /// connection_init's payload (JSON), if any.
    package var initPayload: JSONValue?
    /// Whether `handshake()` gives connection_init; the daemon's link sends it itself instead (an
    /// opening message, with `${token}` filled in at each connect, and the ready gate).
    package var sendsHandshake: Bool

    package init(initPayload: JSONValue? = nil, sendsHandshake: Bool = true) {
        self.initPayload = initPayload
        self.sendsHandshake = sendsHandshake
    }

    package var name: String { "graphql-transport-ws" }

    package func handshake() -> [JSONValue] {
        guard self.sendsHandshake else { return [] }
        var message: JSONValue = ["type": "connection_init"]
        if let payload = self.initPayload { message = message.setting("payload", to: payload) }
        return [message]
    }

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
            if Self.isSubscription(payload["query"]?.stringValue ?? "") {
                return .subscribe(id: WireID(id), key: payload.serialized)
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

    package func serverSubscriptionID(in answer: JSONValue) -> WireID? { nil }

    package func replacingSubscriptionID(in message: JSONValue, with id: WireID) -> JSONValue { message }

    package func subscribeAnswer(id: WireID, subscription: WireID) -> JSONValue? { nil }

    package func unsubscribeAnswer(id: WireID) -> JSONValue? { nil }

    package func linkLostAnswer(id: WireID, reason: String) -> JSONValue {
        ["type": "error", "id": id.json, "payload": [["message": .string("wsbridged: \(reason)")]]]
    }

    /// Whether a GraphQL document's operation is a subscription: its first word, past
    /// whitespace, commas and comments (a document with several operations counts by its first).
    static func isSubscription(_ document: String) -> Bool {
        var rest = Substring(document)
        while let c = rest.first {
            if c == "#" {
                rest = rest.drop { $0 != "\n" }
            } else if c.isWhitespace || c == "," || c == "\u{FEFF}" {
                rest = rest.dropFirst()
            } else {
                break
            }
        }
        return rest.hasPrefix("subscription") && !(rest.dropFirst("subscription".count).first.map { $0.isLetter || $0.isNumber || $0 == "_" } ?? false)
    }
}
