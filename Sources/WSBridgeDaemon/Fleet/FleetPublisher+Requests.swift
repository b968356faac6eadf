import CNATS
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// A bridge answers its followers' sends (docs/fleet.md): each arrives on `fleet.requests` as
/// a NATS request whose data is the message (header `Wsbridge-Kind: binary` for a binary one),
/// goes to the upstream as an app's `send` on this host would, and is answered with its outcome
/// as JSON: `{"outcome":"sent"}`, `{"outcome":"queued","depth":N}` (the link is down: it waits,
/// in order, bounded) or `{"outcome":"rejected","error":"…"}`. With `upstream.protocol`, each
/// carries the follower's app (`Wsbridge-App`), which the bridge's protocol layer holds as an
/// app of its own (FleetRemoteApps).
extension FleetPublisher {
    static let kindHeader = "Wsbridge-Kind"
    /// A follower's sticky set (FleetStickyHolders), from the holder this header names.
    static let stickySetHeader = "Wsbridge-Sticky-Set"
    /// With upstream.protocol: the follower's app a message is from (`holder/app`).
    static let appHeader = "Wsbridge-App"
    /// `Wsbridge-Event` of a follower's app that went.
    static let appLeft = "app-left"
    /// With upstream.protocol: a sticky subscription of the app's, under this key.
    static let stickyHeader = "Wsbridge-Sticky"
    /// With upstream.protocol: the app lets go of its sticky subscription under this key.
    static let unstickHeader = "Wsbridge-Unstick"
    /// On a sticky set: the follower's upstream.protocol (none: raw).
    static let protocolHeader = "Wsbridge-Protocol"

    /// What a follower's message on `fleet.requests` asks.
    enum FollowerRequest {
        case send
        case sticky(key: String)
        case unstick(key: String)
    }

    /// A follower's send (on the event loop; `message` is the client's, destroyed here).
    func request(_ message: UnsafeSendable<OpaquePointer>) {
        let api = self.library.api
        defer { api.natsMsg_Destroy(message.value) }
        // Every bridge hears it; the leader answers (and sends it upstream, once). A standby
        // mirrors the followers' sticky sets and, with upstream.protocol, their apps'
        // subscriptions (nothing else, never answering): a hot one holds them on its own link, a
        // cold one keeps them for when it takes over and opens its link.
        let mirror = self.lease.map { !$0.leading } ?? false
        let app = self.library.header(Self.appHeader, of: message.value)
        if mirror, app == nil && self.library.header(Self.stickySetHeader, of: message.value) == nil { return }
        if let holder = self.library.header(Self.stickySetHeader, of: message.value) {
            self.remoteApps.heard(holder)
            self.stickySet?(holder, self.library.data(of: message.value), self.library.header(Self.protocolHeader, of: message.value))
            return
        }
        // With upstream.protocol: which of the follower's apps it is (`holder/app`).
        if let app, self.library.header(Self.eventHeader, of: message.value) == Self.appLeft {
            self.remoteApps.gone(app)
            return
        }
        guard let replyTo = api.natsMsg_GetReply(message.value).map({ String(cString: $0) }) else { return }
        let answer: (SendOutcome) -> Void = { outcome in if !mirror { self.answer(replyTo, outcome) } }
        let kind: UpstreamMessage.Kind = self.library.header(Self.kindHeader, of: message.value) == "binary" ? .binary : .text
        let outbound = OutboundMessage(kind: kind, data: self.library.data(of: message.value))
        guard let serve = self.serve else {
            answer(.rejected("this wsbridged takes no sends from followers"))
            return
        }
        var id: AppID?
        if let app {
            id = self.remoteApps.id(for: app)
            if id == nil {
                answer(.rejected("\(Self.appHeader) \(app) is not HOLDER/NUMBER: is the follower this wsbridged's version?"))
                return
            }
        }
        var request = FollowerRequest.send
        if let key = self.library.header(Self.stickyHeader, of: message.value) {
            request = .sticky(key: key)
        } else if let key = self.library.header(Self.unstickHeader, of: message.value) {
            request = .unstick(key: key)
        }
        switch serve(outbound, id, request, mirror) {
        case .spooling(let stored):
            stored.assumeIsolated().whenSuccess { answer($0) }
        case let outcome:
            answer(outcome)
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
