import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// Sticky sends: registered, sent now or after the next open, released (docs/sessions.md).
extension LocalPlane {
    /// Registers a sticky send; its text goes now if the link is open, else after the next open.
    func stick(_ options: StickyOptions, _ payload: Payload, id: JSONValue?, from client: LocalClient) {
        if let appProtocol = self.appProtocol {
            // What the protocol cannot read is refused, never kept: sent again on every open, it
            // would drop the connection for every app (a server closing on it, each time).
            guard let views = self.protocolMessages(payload, id: id, for: client) else { return }
            if let reason = views.lazy.compactMap({ appProtocol.session.invalidity(of: $0) }).first {
                self.reply(client, ProtocolError(.invalidValue, "\(appProtocol.session.name): \(reason); nothing was sent or kept", id: id))
                return
            }
            if views.count == 1, let json = views.first, appProtocol.session.requestID(in: json) != nil {
                self.stickThroughProtocol(options, json, id: id, from: client, through: appProtocol)
                return
            }
        }
        // A pool (upstream.subscriptions_per_connection) places a new key on a connection with
        // room, or says why none has.
        if self.session.registry.entry(options.key) == nil, let full = self.link.refusal(forNewKey: options.key, payload: payload) {
            self.reply(client, ProtocolError(.stickyLimit, full, id: id))
            return
        }
        let registered = self.session.register(options, payload: payload, client: client.id, pid: client.credentials?.pid, uid: client.credentials?.uid)
        let outcome: StickyRegistry.Registered
        let holders: Int
        switch registered {
        case .failure(var error):
            error.id = id
            // A pool placed it: the place is free again.
            if self.session.registry.entry(options.key) == nil { self.link.released(key: options.key) }
            self.reply(client, error)
            return
        case .success(let r):
            (outcome, holders) = r
        }
        let status: StickyResult.Status
        if outcome.sends {
            status = self.link.sendAhead(OutboundMessage(payload), key: options.key) ? .sent : .queued
        } else {
            status = .held
        }
        self.logger.debug(
            "sticky key \(options.key): \(outcome) (\(status.rawValue))",
            metadata: ["client.id": "\(client.id)", "sticky.key": "\(options.key)", "sticky.scope": "\(options.scope.rawValue)"])
        let result = StickyResult(status: status, key: options.key, scope: options.scope, holders: holders, state: self.link.phase)
        let line = MessageLineEncoder.line(ReplyLine.ok(id: id, SendResult.sticky(result).json).json, allocator: self.allocator)
        self.replyOnceStored(client, line, id: id)
    }

    /// A sticky send that carries the protocol's id: a subscription of the protocol layer's, sent
    /// again on every open with a fresh id, what carries its id routed to its holder (the client,
    /// or, with scope daemon, every subscriber).
    private func stickThroughProtocol(
        _ options: StickyOptions, _ json: JSONValue, id: JSONValue?, from client: LocalClient, through appProtocol: AppProtocolLayer
    ) {
        let name = appProtocol.session.name
        if options.onUnstick != nil {
            self.reply(
                client,
                ProtocolError(
                    .invalidValue,
                    "\(name): this sticky send carries an id, so it is a subscription the protocol layer keeps, and it ends when its holders leave; on_unstick is not used for it: leave it out",
                    id: id))
            return
        }
        let holder = options.scope == .daemon ? AppID.everyone : client.id
        // With a pool: where the key is held, else the connection with room.
        let layer: AppProtocolLayer
        let link: any LinkControl
        switch self.protocolMember(for: client.id, json, sticky: options.key) {
        case .failure(let full):
            self.reply(client, ProtocolError(.stickyLimit, full.description, id: id))
            return
        case .success(let member):
            (layer, link) = (member.layer, member.link)
        }
        let performed = layer.stickyFromApp(holder, json, key: options.key, link: link)
        self.protocolMembers?.settle()
        if let refusal = performed.refusal {
            self.reply(client, ProtocolError(.invalidValue, "\(name): \(refusal)", id: id))
            return
        }
        if case .spooling(let stored) = performed.sent {
            // A fleet follower's: the bridge's layer holds it, and says how that went.
            let ticket = client.holdReply()
            stored.assumeIsolated().whenSuccess { outcome in
                let reply: JSONValue
                if case .rejected(let why) = outcome {
                    reply = ProtocolError(.invalidValue, why, id: id).reply
                } else {
                    let status: StickyResult.Status = if case .queued = outcome { .queued } else { .sent }
                    let result = StickyResult(status: status, key: options.key, scope: options.scope, holders: 1, state: self.link.phase)
                    reply = ReplyLine.ok(id: id, SendResult.sticky(result).json).json
                }
                client.fillReply(ticket, MessageLineEncoder.line(reply, allocator: self.allocator))
            }
            return
        }
        let status: StickyResult.Status = performed.sent != nil ? .sent : (link.phase == .open ? .held : .queued)
        let holders = layer.session.stickyHolders(options.key) ?? 1
        let result = StickyResult(status: status, key: options.key, scope: options.scope, holders: holders, state: self.link.phase)
        self.ok(client, id, SendResult.sticky(result).json)
    }

    func unstick(_ key: String, leave: String?, scope: StickyScope?, id: JSONValue?, from client: LocalClient) {
        if self.appProtocol != nil {
            let holder = scope == .daemon ? AppID.everyone : client.id
            if let (performed, holders) = self.protocolStickyRelease(holder, key: key) {
                self.ok(client, id, UnstickResult(key: key, holders: holders, leave: performed.sent != nil ? "sent" : "none").json)
                return
            }
        }
        let result: UnstickResult
        switch self.session.release(key: key, client: client.id, scope: scope, leave: leave) {
        case .failure(var error):
            error.id = id
            self.reply(client, error)
            return
        case .success(.stillHeld(let holders)):
            result = UnstickResult(key: key, holders: holders, leave: "none")
        case .success(.removed(let text)):
            result = UnstickResult(key: key, holders: 0, leave: self.sendLeave(text, key: key))
            self.link.released(key: key)
        }
        let line = MessageLineEncoder.line(ReplyLine.ok(id: id, result.json).json, allocator: self.allocator)
        self.replyOnceStored(client, line, id: id)
    }

    /// A client's keys go with it; the leave texts of keys nobody holds any more go upstream.
    func releaseSticky(of client: LocalClient) {
        for (key, message) in self.session.clientGone(client.id) {
            if let message, !self.link.sendAhead(message, key: key) {
                self.logger.debug("a sticky key's leave text was not sent: the link is not open, and the next connection never had the key")
            }
            self.link.released(key: key)
        }
    }

    /// `sent`, `none` or `skipped` (the link is not open: the next connection never had the key).
    private func sendLeave(_ text: String?, key: String) -> String {
        guard let text else { return "none" }
        return self.link.sendAhead(OutboundMessage(.text(text)), key: key) ? "sent" : "skipped"
    }

    /// Sends `line` now, or, when the request changed the daemon-scope keys and `queue.spool` is
    /// set, once the key file is on disk (later replies to this client wait their turn).
    private func replyOnceStored(_ client: LocalClient, _ line: ByteBuffer, id: JSONValue?) {
        guard let stored = self.session.persistChanges() else {
            client.send(line)
            return
        }
        let ticket = client.holdReply()
        stored.assumeIsolated().whenComplete { result in
            switch result {
            case .success:
                client.fillReply(ticket, line)
            case .failure(let error):
                let problem = ProtocolError(
                    .internalError,
                    "the daemon-scope sticky keys could not be stored (\(error)): the change holds until wsbridged stops, not after; free space or fix the permissions of queue.spool, then send it again",
                    id: id)
                client.fillReply(ticket, MessageLineEncoder.line(problem.reply, allocator: self.allocator))
            }
        }
    }

    /// The reply to a send that went out, but for its id.
    private static let sentReply = ReplyLine.Constant(result: SendResult.sent.json)

    /// The reply line to a `send`.
    func sendReply(_ outcome: SendOutcome, id: JSONValue?) -> ByteBuffer {
        let json: JSONValue
        switch outcome {
        case .sent:
            return Self.sentReply.line(id: id, allocator: self.allocator)
        case .queued(let depth): json = ReplyLine.ok(id: id, SendResult.queued(depth: depth, state: self.link.phase, waits: self.link.sendsWait).json).json
        case .rejected(let problem): json = ProtocolError(.queueFull, problem, id: id).reply
        case .spooling: json = ProtocolError(.internalError, "bug: a send was answered before the spool stored it", id: id).reply
        }
        return MessageLineEncoder.line(json, allocator: self.allocator)
    }
}

extension LocalPlane {
    /// A follower's message on `fleet.requests` (FleetPublisher+Requests): `app`, with
    /// upstream.protocol, the follower's app it is from (FleetRemoteApps).
    /// `mirror`: a hot standby's copy (FleetPublisher+Requests): only its subscriptions go.
    func fromFollower(_ message: OutboundMessage, app: AppID?, _ request: FleetPublisher.FollowerRequest, mirror: Bool = false) -> SendOutcome {
        guard let appProtocol = self.appProtocol else {
            guard app == nil else {
                return .rejected("this bridge runs upstream.protocol = \"raw\": set the same upstream.protocol on the follower as on its bridge")
            }
            return self.link.send(message)
        }
        let name = appProtocol.session.name
        guard let app else {
            return .rejected("this bridge runs upstream.protocol = \(name): set upstream.protocol = \"\(name)\" on the follower too")
        }
        if case .unstick(let key) = request {
            guard let (performed, _) = self.protocolStickyRelease(app, key: key) else {
                return .rejected("\(name): no sticky subscription \(key) is held for this app")
            }
            return performed.sent ?? .sent
        }
        let payload: Payload = message.kind == .binary ? .binary(Array(buffer: message.data)) : .text(String(buffer: message.data))
        let views: [JSONValue]
        switch self.appMessages(payload) {
        case .failure(let error): return .rejected(error.description)
        case .success(let v): views = mirror ? v.filter { appProtocol.session.isSubscription($0) } : v
        }
        let performed: AppProtocolLayer.Performed
        if case .sticky(let key) = request {
            guard views.count == 1, let json = views.first else { return .rejected("\(name): a sticky subscription is one message") }
            switch self.protocolMember(for: app, json, sticky: key) {
            case .failure(let full): return .rejected(full.description)
            case .success(let member):
                performed = member.layer.stickyFromApp(app, json, key: key, link: member.link)
                self.protocolMembers?.settle()
            }
        } else {
            performed = self.throughProtocol(app, views)
        }
        if let refusal = performed.refusal { return .rejected("\(name): \(refusal)") }
        // Answered here, or (a subscription, the link down) kept for the next open.
        return performed.sent ?? (performed.delivered || self.link.phase == .open ? .sent : .queued(depth: 0))
    }
}
