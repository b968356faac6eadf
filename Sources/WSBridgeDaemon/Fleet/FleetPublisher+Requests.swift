import CNATS
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// A bridge answers its followers' sends (docs/fleet.md): each arrives on `fleet.requests` as
/// a NATS request whose data is the message (header `Wsbridge-Kind: binary` for a binary one),
/// goes to the upstream as an app's `send` on this host would, and is answered with its outcome
/// as JSON: `{"outcome":"sent"}`, `{"outcome":"queued","depth":N}` (the link is down: it waits,
/// in order, bounded) or `{"outcome":"rejected","error":"…"}`.
extension FleetPublisher {
    static let kindHeader = "Wsbridge-Kind"
    /// A follower's sticky set (FleetStickyHolders), from the holder this header names.
    static let stickySetHeader = "Wsbridge-Sticky-Set"

    /// A follower's send (on the event loop; `message` is the client's, destroyed here).
    func request(_ message: UnsafeSendable<OpaquePointer>) {
        let api = self.library.api
        defer { api.natsMsg_Destroy(message.value) }
        // Every bridge hears it; the leader answers (and sends it upstream, once).
        if let lease = self.lease, !lease.leading { return }
        if let holder = self.library.header(Self.stickySetHeader, of: message.value) {
            self.stickySet?(holder, self.library.data(of: message.value))
            return
        }
        guard let replyTo = api.natsMsg_GetReply(message.value).map({ String(cString: $0) }) else { return }
        let kind: UpstreamMessage.Kind = self.library.header(Self.kindHeader, of: message.value) == "binary" ? .binary : .text
        let outbound = OutboundMessage(kind: kind, data: self.library.data(of: message.value))
        guard let serve = self.serve else {
            self.answer(replyTo, .rejected("this wsbridged takes no sends from followers"))
            return
        }
        switch serve(outbound) {
        case .spooling(let stored):
            stored.assumeIsolated().whenSuccess { self.answer(replyTo, $0) }
        case let outcome:
            self.answer(replyTo, outcome)
        }
    }

    private func answer(_ replyTo: String, _ outcome: SendOutcome) {
        guard let connection = self.connection else { return }
        let json: JSONValue =
            switch outcome {
            case .sent: ["outcome": "sent"]
            case .queued(let depth): ["outcome": "queued", "depth": .number(JSONNumber(depth))]
            case .rejected(let why): ["outcome": "rejected", "error": .string(why)]
            case .spooling: ["outcome": "rejected", "error": "bug: answered before the spool stored it"]
            }
        let text = json.serialized
        _ = self.library.api.natsConnection_Publish(connection, replyTo, text, Int32(text.utf8.count))
    }

    /// A bridge's answer to a follower's send, as the follower's link tells it to its app.
    static func outcome(ofAnswer data: ByteBuffer) -> SendOutcome {
        guard let json = try? JSONValue.parse(data.readableBytesView), case .string(let outcome)? = json["outcome"] else {
            return .rejected("the bridge's answer could not be read: \(String(buffer: data).prefix(200))")
        }
        switch outcome {
        case "sent": return .sent
        case "queued":
            guard case .number(let n)? = json["depth"], let depth = Int(n.description) else { return .queued(depth: 1) }
            return .queued(depth: depth)
        default:
            guard case .string(let why)? = json["error"] else { return .rejected("the bridge refused the message") }
            return .rejected("the bridge refused it: \(why)")
        }
    }
}
