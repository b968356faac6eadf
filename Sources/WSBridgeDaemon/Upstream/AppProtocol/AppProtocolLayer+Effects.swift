import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// The application protocol (`upstream.protocol`): what the protocol layer (`AppProtocolSession`)
/// decides, carried out. Messages that belong to an app go to that app only, numbered in the
/// stream like every message but kept out of the replay ring and the journal (a new connection
/// owns nothing, so a replay of them would reach nobody's).
/// What the protocol session decides, carried out: upstream sends through the link, lines for
/// one app each through the fan-out, requests answered by id, and the keepalive the server set handed to the link (which keeps it with the connection).
extension AppProtocolLayer {
    /// What happened to the messages the protocol layer sent upstream or refused.
    struct Performed {
        var broadcast = false
        /// The last upstream send's outcome (nil: nothing went upstream).
        var sent: SendOutcome?
        var refusal: String?
        /// Something went to an app (a local answer).
        var delivered = false
    }

    /// Carries out `effects`: upstream sends through the link, lines for one app each.
    /// `lost`: the effects are the link's loss (a request waiting for an answer gets `link_lost`).
    /// `original`: the upstream message the effects answer, its view and its bytes; a message for
    /// an app that is its view unchanged (its ids were the app's own) goes as those bytes, not
    /// written again.
    @discardableResult
    func perform(
        _ effects: [AppProtocolEffect], link: any ProtocolTransport, receivedAtMillis: Int64, lost: String? = nil,
        original: (view: JSONValue, data: ByteBuffer)? = nil
    ) -> Performed {
        var performed = Performed()
        for effect in effects {
            switch effect {
            case .broadcast:
                performed.broadcast = true
            case .upstream(let json):
                performed.sent = link.send(OutboundMessage(.text(self.wireText(json))))
            case .app(AppID.everyone, let json):
                // A daemon-scope sticky subscription's: for every subscriber.
                self.fanout.publish(
                    UpstreamMessage(kind: .text, data: self.wireBytes(json, original: original), receivedAtMillis: receivedAtMillis), parsed: json)
            case .app(let app, var json):
                if !self.batches.isEmpty {
                    // An answer a batch of the app's waits for: held, or the batch's array.
                    switch self.batches.take(json, for: app) {
                    case .held:
                        performed.delivered = true
                        continue
                    case .complete(let array): json = array
                    case .notBatched: break
                    }
                }
                guard let client = self.fanout.client(app) else {
                    // An app on the WebSocket face: a frame of its own. A fleet follower's app:
                    // into the stream, for that follower.
                    let data = self.wireBytes(json, original: original)
                    if self.fanout.deliverToWebSocketApp(app, data: data) || self.fanout.deliverToFollower(app, data: data, receivedAtMillis: receivedAtMillis)
                    {
                        performed.delivered = true
                    }
                    continue
                }
                performed.delivered = true
                if self.requests.hasByID, self.answerRequest(of: client, with: json, lost: lost) { continue }
                self.fanout.deliver(json, data: self.wireBytes(json, original: original), to: client, receivedAtMillis: receivedAtMillis)
            case .refuse(let reason):
                performed.refusal = reason
            case .ready:
                break
            case .timing(let timing):
                // Kept by the link with the connection it was set on.
                link.keepalive(timing, protocol: self.session.name)
            case .serverError(let text, let fatal):
                let name = self.session.name
                self.serverError = AppProtocolServerError(text: text, at: WallClock.millisecondsSinceEpoch())
                self.logger.warning("\(name): the server reported an error: \(text)\(fatal ? "; the link reconnects" : "")", metadata: ["protocol": "\(name)"])
                if fatal { link.fail("\(name): the server reported an error: \(text)") }
            }
        }
        return performed
    }

    /// A view as the wire carries it.
    func wireText(_ json: JSONValue) -> String { self.codec.wireText(json) }

    /// A view for local clients, as the wire carries it: the upstream message's own bytes when
    /// the view is that message's unchanged (its ids were already the app's), else written.
    func wireBytes(_ json: JSONValue, original: (view: JSONValue, data: ByteBuffer)?) -> ByteBuffer {
        if let original, json.serializesLike(original.view) { return original.data }
        return ByteBuffer(string: self.wireText(json))
    }

    /// A message from an app (`send`: a local client's, or a fleet follower's app's), through
    /// the protocol layer. On a follower, it goes to the bridge as it is (`+Remote`).
    func fromApp(_ app: AppID, _ json: JSONValue, link: any LinkControl) -> Performed {
        if let remote = self.remote { return remote.fromApp(app, self.wireText(json)) }
        if case .array(let items) = json, self.codec.takesBatches { return self.fromApp(app, batch: items, link: link) }
        let effects = self.withSession { $0.fromApp(app, json) }
        let performed = self.perform(effects, link: link, receivedAtMillis: WallClock.millisecondsSinceEpoch())
        if performed.refusal == nil { self.mirror { $0.mirror(fromApp: app, json) } }
        return performed
    }

    /// A JSON-RPC batch from an app (`AppProtocolBatches`): each item through the layer as if
    /// sent alone, their answers held and given to the app as one array, in order; an item
    /// refused is answered in its place, and the others go on.
    private func fromApp(_ app: AppID, batch items: [JSONValue], link: any LinkControl) -> Performed {
        let now = WallClock.millisecondsSinceEpoch()
        guard !items.isEmpty else { return self.perform([.app(app, AppProtocolBatches.emptyBatch)], link: link, receivedAtMillis: now) }
        let number = self.batches.open(app, items: items)
        var all = Performed()
        for (item, slot) in zip(items, AppProtocolBatches.slots(items)) {
            let one: Performed
            if case .object = item {
                one = self.fromApp(app, item, link: link)
            } else {
                one = Performed(refusal: "a batch holds JSON-RPC request objects, not \(item.serialized.prefix(40))")
            }
            all.delivered = all.delivered || one.delivered
            if let sent = one.sent { all.sent = sent }
            guard let refusal = one.refusal, let number, let slot else { continue }
            if case .complete(let array) = self.batches.fill(app, batch: number, slot: slot, with: AppProtocolBatches.refusal(of: item, refusal)) {
                all.delivered = self.perform([.app(app, array)], link: link, receivedAtMillis: now).delivered || all.delivered
            }
        }
        return all
    }

    /// Several messages from an app (one `send` of a text protocol): in order, up to the first
    /// the protocol refuses.
    func fromApp(_ app: AppID, _ views: [JSONValue], link: any LinkControl) -> Performed {
        Self.inOrder(views) { self.fromApp(app, $0, link: link) }
    }

    /// `views` through `one`, in order, up to the first refused: what they did together, the
    /// refusal naming which message it was.
    static func inOrder(_ views: [JSONValue], _ perform: (JSONValue) -> Performed) -> Performed {
        var all = Performed()
        for (index, view) in views.enumerated() {
            let one = perform(view)
            all.delivered = all.delivered || one.delivered
            if let sent = one.sent { all.sent = sent }
            if let refusal = one.refusal {
                all.refusal = views.count == 1 ? refusal : "message \(index + 1) of \(views.count): \(refusal)"
                break
            }
        }
        return all
    }

    /// A sticky send that carries an id, through the protocol layer: a subscription `holder`
    /// keeps (`AppID.everyone`: the daemon's), sent again on every open.
    func stickyFromApp(_ holder: AppID, _ json: JSONValue, key: String, link: any LinkControl) -> Performed {
        if let remote = self.remote { return Performed(sent: remote.sticky(holder, self.wireText(json), key: key)) }
        let effects = self.withSession { $0.stickySubscribe(holder, json, key: key) }
        let performed = self.perform(effects, link: link, receivedAtMillis: WallClock.millisecondsSinceEpoch())
        if performed.refusal == nil { self.mirror { $0.mirror(sticky: holder, json, key: key) } }
        return performed
    }

    /// `holder` lets go of sticky `key`: nil when the protocol layer had no such subscription.
    func stickyRelease(_ holder: AppID, key: String, link: any LinkControl) -> Performed? {
        if let remote = self.remote { return remote.unstick(holder, key: key).map { Performed(sent: $0) } }
        guard let effects = self.withSession({ $0.stickyRelease(holder, key: key) }) else { return nil }
        self.mirror { $0.stickyRelease(holder, key: key)?.filter(\.isUpstream) ?? [] }
        return self.perform(effects, link: link, receivedAtMillis: WallClock.millisecondsSinceEpoch())
    }

    /// The operator's `clear_set_aside`: the set-aside subscriptions go again; how many.
    func clearSetAside(link: any LinkControl) -> Int {
        let (count, effects) = self.withSession { $0.clearSetAside() }
        self.mirror { $0.clearSetAside().effects.filter(\.isUpstream) }
        self.perform(effects, link: link, receivedAtMillis: WallClock.millisecondsSinceEpoch())
        return count
    }

    /// An app went away: what it held is let go (ended upstream when it was the last holder).
    func appLeft(_ app: AppID, link: any LinkControl) {
        self.requests.cancelAnswers(of: app)
        self.batches.appLeft(app)
        if let remote = self.remote {
            remote.appLeft(app)
            return
        }
        let effects = self.withSession { $0.appLeft(app) }
        self.mirror { $0.appLeft(app).filter(\.isUpstream) }
        self.perform(effects, link: link, receivedAtMillis: WallClock.millisecondsSinceEpoch())
    }

    // MARK: - Requests answered by id

    /// Whether `json` (an upstream message, the app's id restored) answers one of `client`'s
    /// requests: then the request's reply carries it (or, `lost`, a `link_lost` error).
    private func answerRequest(of client: LocalClient, with json: JSONValue, lost: String?) -> Bool {
        guard let (id, final) = self.session.answerIDs(in: json).first(where: { self.requests.isWaiting(client, $0.id.key) })
        else { return false }
        guard case .reply(let replyID) = self.requests.answer(client, key: id.key, final: final) else { return true }
        self.fanout.flush()
        if let lost {
            let error = ProtocolError(.linkLost, "\(lost); send the request again once status says open", id: replyID)
            client.send(MessageLineEncoder.line(error.reply, allocator: self.allocator))
        } else {
            let reply = ReplyLine.ok(id: replyID, RequestResult(seq: self.fanout.takeSeq(), payload: json).json)
            client.send(MessageLineEncoder.line(reply.json, allocator: self.allocator))
        }
        return true
    }
}

/// The server's last error report (STOMP `ERROR`, NATS `-ERR`, Socket.IO `44`), for status.
struct AppProtocolServerError {
    var text: String
    /// Milliseconds since the epoch.
    var at: Int64
}
