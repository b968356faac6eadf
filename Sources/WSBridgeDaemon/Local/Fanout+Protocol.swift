import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// The application protocol (`upstream.protocol`): what the protocol layer (`ProtocolSession`)
/// decides, carried out. Messages that belong to an app go to that app only, numbered in the
/// stream like every message but kept out of the replay ring and the journal (a new connection
/// owns nothing, so a replay of them would reach nobody's).
extension Fanout {
    /// A text message from the upstream, through the protocol layer: whether it goes on to every
    /// subscriber (a broadcast), as before.
    @inline(never)  // off the raw message path, which only tests `routing`
    func route(_ message: UpstreamMessage, link: any LinkControl) -> (broadcast: Bool, parsed: JSONValue?) {
        // None of the protocol's keys in the text: for everyone, without reading it.
        if let needles = self.routingNeedles, !message.data.withUnsafeReadableBytes({ RoutingKeys.mayRoute($0, needles: needles) }) {
            return (true, nil)
        }
        guard let json = try? JSONValue.parse(message.data.readableBytesView) else { return (true, nil) }
        guard let effects = self.withRouter({ $0.fromUpstream(json) }) else { return (true, json) }
        let performed = self.perform(effects, link: link, receivedAtMillis: message.receivedAtMillis, original: (json, message.data))
        return (performed.broadcast, json)
    }

    /// A WebSocket message of a text protocol (Socket.IO, STOMP, NATS): each of the protocol's
    /// messages in it goes through the protocol layer, and each broadcast is a message of its own
    /// (its own seq), its view parsed for filters and `inline_json`.
    @inline(never)
    func routeText(_ message: UpstreamMessage, link: any LinkControl) {
        // A server event for everyone, when nobody needs its view (a filter, inline_json, a
        // request's match): as it came, unread.
        if !self.needsView, message.data.withUnsafeReadableBytes({ self.router!.isBroadcast($0) }) {
            self.publish(UpstreamMessage(kind: .text, data: message.data, receivedAtMillis: message.receivedAtMillis))
            return
        }
        let split = message.data.withUnsafeReadableBytes { self.router!.split(upstream: $0) }
        switch split {
        case .failure(let error):
            self.logger.warning(
                "\(self.router?.name ?? ""): \(error); the upstream message goes to every subscriber as it came",
                metadata: ["protocol": "\(self.router?.name ?? "")"])
            self.publish(UpstreamMessage(kind: .text, data: message.data, receivedAtMillis: message.receivedAtMillis))
        case .success(let messages):
            // One message that is the whole WebSocket message: its bytes as they came, no copy.
            let whole = messages.count == 1 && messages[0].text.utf8.count == message.data.readableBytes
            for one in messages {
                let effects = self.withRouter { $0.fromUpstream(one.view) } ?? []
                let data = whole ? message.data : ByteBuffer(string: one.text)
                let wire = UpstreamMessage(kind: .text, data: data, receivedAtMillis: message.receivedAtMillis)
                if self.perform(effects, link: link, receivedAtMillis: message.receivedAtMillis, original: (one.view, data)).broadcast {
                    self.publish(wire, parsed: one.view)
                } else if !self.wireTaps.isEmpty {
                    self.tapWire(wire, parsed: one.view)
                }
            }
        }
    }

    /// Runs `body` on the protocol layer, its clock set (nil: no protocol).
    func withRouter(_ body: (inout any ProtocolRouter) -> [ProtocolEffect]) -> [ProtocolEffect]? {
        guard self.router != nil else { return nil }
        self.router!.now = WallClock.millisecondsSinceEpoch()
        return body(&self.router!)
    }

    /// The link opened (the session re-established, the handshake acknowledged) or left `open`.
    func protocolLink(_ link: any LinkControl, changedTo phase: ConnectionPhase, reason: String, closedRightAfterOpen: Bool) {
        if phase != .open { self.protocolKeepalive.stop() }
        let lost = "the upstream link went \(phase.rawValue) (\(reason)) before the answer came"
        let culprit = self.router?.culprit
        guard
            let effects = self.withRouter({
                phase == .open ? $0.opened() : $0.lost(reason: lost, closedRightAfterOpen: closedRightAfterOpen ? reason : nil)
            })
        else { return }
        if let now = self.router?.culprit, now != culprit {
            self.logger.warning("\(now)", metadata: ["protocol": "\(self.router?.name ?? "")"])
        }
        self.perform(effects, link: link, receivedAtMillis: WallClock.millisecondsSinceEpoch(), lost: phase == .open ? nil : lost)
    }

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
        _ effects: [ProtocolEffect], link: any LinkControl, receivedAtMillis: Int64, lost: String? = nil, original: (view: JSONValue, data: ByteBuffer)? = nil
    ) -> Performed {
        var performed = Performed()
        for effect in effects {
            switch effect {
            case .broadcast:
                performed.broadcast = true
            case .upstream(let json):
                performed.sent = link.send(UpstreamMessage(.text(self.wireText(json))))
            case .app(AppID.everyone, let json):
                // A daemon-scope sticky subscription's: for every subscriber.
                self.publish(UpstreamMessage(kind: .text, data: self.wireBytes(json, original: original), receivedAtMillis: receivedAtMillis), parsed: json)
            case .app(let app, let json):
                guard let client = self.clients[app] else { continue }
                performed.delivered = true
                if !self.protocolRequests.isEmpty, self.answerRequest(of: client, with: json, lost: lost) { continue }
                self.deliver(json, data: self.wireBytes(json, original: original), to: client, receivedAtMillis: receivedAtMillis)
            case .refuse(let reason):
                performed.refusal = reason
            case .ready:
                break
            case .timing(let timing):
                self.startKeepalive(timing, link: link)
            case .serverError(let text, let fatal):
                let name = self.router?.name ?? ""
                self.protocolError = ProtocolServerError(text: text, at: WallClock.millisecondsSinceEpoch())
                self.logger.warning("\(name): the server reported an error: \(text)\(fatal ? "; the link reconnects" : "")", metadata: ["protocol": "\(name)"])
                if fatal { link.fail("\(name): the server reported an error: \(text)") }
            }
        }
        return performed
    }

    /// A view as the wire carries it.
    private func wireText(_ json: JSONValue) -> String { self.router?.wireText(json) ?? json.serialized }

    /// A view for local clients, as the wire carries it: the upstream message's own bytes when
    /// the view is that message's unchanged (its ids were already the app's), else written.
    private func wireBytes(_ json: JSONValue, original: (view: JSONValue, data: ByteBuffer)?) -> ByteBuffer {
        if let original, json.serializesLike(original.view) { return original.data }
        return ByteBuffer(string: self.wireText(json))
    }

    /// A message from a local app (`send`), through the protocol layer.
    func fromApp(_ client: LocalClient, _ json: JSONValue, link: any LinkControl) -> Performed {
        guard let effects = self.withRouter({ $0.fromApp(client.id, json) }) else { return Performed() }
        return self.perform(effects, link: link, receivedAtMillis: WallClock.millisecondsSinceEpoch())
    }

    /// Several messages from a local app (one `send` of a text protocol): in order, up to the
    /// first the protocol refuses.
    func fromApp(_ client: LocalClient, _ views: [JSONValue], link: any LinkControl) -> Performed {
        var all = Performed()
        for (index, view) in views.enumerated() {
            let one = self.fromApp(client, view, link: link)
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
        guard let effects = self.withRouter({ $0.stickySubscribe(holder, json, key: key) }) else { return Performed() }
        return self.perform(effects, link: link, receivedAtMillis: WallClock.millisecondsSinceEpoch())
    }

    /// `holder` lets go of sticky `key`: nil when the protocol layer had no such subscription.
    func stickyRelease(_ holder: AppID, key: String, link: any LinkControl) -> Performed? {
        guard self.router != nil, let effects = self.router!.stickyRelease(holder, key: key) else { return nil }
        return self.perform(effects, link: link, receivedAtMillis: WallClock.millisecondsSinceEpoch())
    }

    /// The operator's `clear_set_aside`: the set-aside subscriptions go again; how many.
    func clearSetAside(link: any LinkControl) -> Int {
        guard self.router != nil else { return 0 }
        let (count, effects) = self.router!.clearSetAside()
        self.perform(effects, link: link, receivedAtMillis: WallClock.millisecondsSinceEpoch())
        return count
    }

    /// A local app went away: what it held is let go (ended upstream when it was the last holder).
    func appLeft(_ client: LocalClient, link: any LinkControl) {
        self.protocolRequests.cancelAll(of: client)
        guard let effects = self.withRouter({ $0.appLeft(client.id) }) else { return }
        self.perform(effects, link: link, receivedAtMillis: WallClock.millisecondsSinceEpoch())
    }

    // MARK: - Requests answered by id

    /// Whether `json` (an upstream message, the app's id restored) answers one of `client`'s
    /// requests: then the request's reply carries it (or, `lost`, a `link_lost` error).
    private func answerRequest(of client: LocalClient, with json: JSONValue, lost: String?) -> Bool {
        guard let candidates = self.router?.answerIDs(in: json),
            let (id, final) = candidates.first(where: { self.protocolRequests.isWaiting(client, $0.id.key) })
        else { return false }
        guard case .reply(let replyID) = self.protocolRequests.answer(client, key: id.key, final: final) else { return true }
        self.flush()
        if let lost {
            let error = ProtocolError(.linkLost, "\(lost); send the request again once status says open", id: replyID)
            client.send(MessageLineEncoder.line(error.reply, allocator: self.allocator))
        } else {
            let reply = ReplyLine.ok(id: replyID, RequestResult(seq: self.takeSeq(), payload: json).json)
            client.send(MessageLineEncoder.line(reply.json, allocator: self.allocator))
        }
        return true
    }
}

/// The application protocol's keepalive on the open link (`ProtocolTiming`): what the daemon sends
/// on a timer (STOMP's heart-beats), and the deadline after which a silent server is a dead link
/// (a repeated check of a flag every upstream message sets: no timer per message).
struct ProtocolKeepalive {
    /// An upstream message arrived since the last check.
    var heard = false
    var sender: Scheduled<Void>?
    var checker: Scheduled<Void>?

    mutating func stop() {
        self.sender?.cancel()
        self.checker?.cancel()
        self.sender = nil
        self.checker = nil
    }
}

/// The server's last error report (STOMP `ERROR`, NATS `-ERR`, Socket.IO `44`), for status.
struct ProtocolServerError {
    var text: String
    /// Milliseconds since the epoch.
    var at: Int64
}

extension Fanout {
    /// Starts the keepalive the server set on this connection (replacing any earlier one).
    func startKeepalive(_ timing: ProtocolTiming, link: any LinkControl) {
        self.protocolKeepalive.stop()
        self.protocolKeepalive.heard = true
        if let every = timing.sendEvery, every > 0 { self.keepaliveSend(timing.text, every: every, link: link) }
        if let deadline = timing.deadline, deadline > 0 { self.keepaliveCheck(deadline: deadline, link: link) }
    }

    private func keepaliveSend(_ text: String, every: Int64, link: any LinkControl) {
        self.protocolKeepalive.sender = self.eventLoop.assumeIsolated().scheduleTask(in: .milliseconds(every)) { [weak self] in
            guard let self, link.phase == .open else { return }
            _ = link.sendAhead(UpstreamMessage(.text(text)))
            self.keepaliveSend(text, every: every, link: link)
        }
    }

    private func keepaliveCheck(deadline: Int64, link: any LinkControl) {
        self.protocolKeepalive.checker = self.eventLoop.assumeIsolated().scheduleTask(in: .milliseconds(deadline)) { [weak self] in
            guard let self else { return }
            guard self.protocolKeepalive.heard else {
                self.protocolKeepalive.stop()
                let name = self.router?.name ?? ""
                link.fail("\(name): nothing from the server for \(deadline) ms, past the keepalive deadline the server set on this connection")
                return
            }
            self.protocolKeepalive.heard = false
            self.keepaliveCheck(deadline: deadline, link: link)
        }
    }
}
