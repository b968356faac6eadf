import WSBridgeProtocol

/// JSON-RPC 2.0 over WebSocket: calls with an `id` answered by a response with that id;
/// notifications (no id) forwarded. Subscriptions the Ethereum way: a `*_subscribe` call is
/// answered with a server-assigned subscription id, events come as notifications whose
/// `params.subscription` names it, and `*_unsubscribe` with that id ends it.
package struct JSONRPC: AppProtocolCodec {
    package init() {}

    package init(settings: Configuration.ApplicationProtocol) {}

    package var name: String { "jsonrpc" }
    package var takesBatches: Bool { true }
    /// Answers carry "id", events "subscription".
    package var routingKeys: [String]? { ["id", "subscription"] }

    package func wireID(_ n: UInt64) -> WireID { WireID(.number(JSONNumber(n))) }

    package func classify(fromApp message: JSONValue) -> AppOp {
        guard case .object = message else {
            // A batch (an array) is taken apart before this (`AppProtocolBatches`).
            return .invalid("a JSON-RPC request is an object, or a batch of them in an array (one level)")
        }
        guard let method = message["method"]?.stringValue else { return .invalid("a JSON-RPC request needs a \"method\"") }
        guard let id = message["id"], id != .null else { return .other }
        switch id {
        case .string, .number: return self.classify(method: method, id: WireID(id), params: message["params"])
        default: return .invalid("a JSON-RPC \"id\" is a string or a number")
        }
    }

    private func classify(method: String, id: WireID, params: JSONValue?) -> AppOp {
        if method.hasSuffix("_unsubscribe") {
            guard case .array(let items) = params, let target = items.first else { return .call(id: id) }
            return .unsubscribe(id: id, target: WireID(target))
        }
        if method.hasSuffix("_subscribe") {
            return .subscribe(id: id, key: method + " " + (params?.serialized ?? "null"))
        }
        return .call(id: id)
    }

    package func classify(fromUpstream message: JSONValue) -> UpstreamOp {
        if let id = message["id"], id != .null, message["method"] == nil, message["result"] != nil || message["error"] != nil {
            return .answer(id: WireID(id), final: true)
        }
        if message["id"] == nil, message["method"] != nil, let subscription = message["params"]?["subscription"] {
            return .event(subscription: WireID(subscription))
        }
        return .broadcast
    }

    package func replacingID(in message: JSONValue, with id: WireID) -> JSONValue { message.setting("id", to: id.json) }

    package func handshakeAnswer(acknowledgement: JSONValue?) -> JSONValue { acknowledgement ?? .null }

    package func pong(to ping: JSONValue) -> JSONValue? { ping }

    package func endMessage(upstreamID: WireID, serverID: WireID?, callID: WireID) -> JSONValue? {
        guard let serverID else { return nil }
        return ["jsonrpc": "2.0", "id": callID.json, "method": "eth_unsubscribe", "params": [serverID.json]]
    }

    package func serverSubscriptionID(in answer: JSONValue) -> WireID? {
        guard let result = answer["result"], answer["error"] == nil else { return nil }
        switch result {
        case .string, .number: return WireID(result)
        default: return nil
        }
    }

    package func replacingSubscriptionID(in message: JSONValue, with id: WireID) -> JSONValue {
        if message["result"] != nil && message["method"] == nil { return message.setting("result", to: id.json) }
        guard let params = message["params"] else { return message }
        return message.setting("params", to: params.setting("subscription", to: id.json))
    }

    package func subscribeAnswer(id: WireID, subscription: WireID) -> JSONValue? {
        ["jsonrpc": "2.0", "id": id.json, "result": subscription.json]
    }

    package func unsubscribeAnswer(id: WireID) -> JSONValue? { ["jsonrpc": "2.0", "id": id.json, "result": true] }

    package func linkLostAnswer(id: WireID, reason: String) -> JSONValue {
        ["jsonrpc": "2.0", "id": id.json, "error": ["code": -32000, "message": .string("wsbridged: \(reason)")]]
    }
}
