import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// The command router: a client's request line is decoded, authorized and executed against the
/// link and the fan-out; every outcome is one reply line.
extension LocalPlane {
    func handle(_ input: LocalLine, from client: LocalClient) {
        let request: Request
        switch RequestDecoding.decode(input, limits: self.requestLimits) {
        case .none:
            return  // blank line
        case .failure(let error)?:
            self.reply(client, error)
            return
        case .success(let r)?:
            request = r
        }
        let op = request.command.op
        if op.writes && !client.mayWrite {
            let uid = client.credentials.map { String($0.uid) } ?? "unknown"
            self.reply(
                client,
                ProtocolError(
                    .forbidden,
                    "uid \(uid) may subscribe and read status but not \(op.rawValue): add it to access.write_uids, or a group of it to access.write_groups",
                    id: request.id
                )
            )
            return
        }
        self.execute(request, from: client)
    }

    private var requestLimits: RequestLimits {
        RequestLimits(filterMaxBytes: self.configuration.local.filterMaxBytes, filterMaxDepth: self.configuration.local.filterMaxDepth)
    }

    func reply(_ client: LocalClient, _ error: ProtocolError) {
        client.send(MessageLineEncoder.line(error.reply, allocator: self.allocator))
    }

    private func ok(_ client: LocalClient, _ id: JSONValue?, _ result: JSONValue) {
        client.send(MessageLineEncoder.line(ReplyLine.ok(id: id, result).json, allocator: self.allocator))
    }

    private func execute(_ request: Request, from client: LocalClient) {
        let id = request.id
        let link = self.link
        switch request.command {
        case .subscribe(_, _, _, all: true) where !client.mayWrite:
            let uid = client.credentials.map { String($0.uid) } ?? "unknown"
            self.reply(
                client,
                ProtocolError(
                    .forbidden,
                    "uid \(uid) may not see the wire as it is (\"all\": other apps' answers): add it to access.write_uids, or a group of it to access.write_groups",
                    id: id))
        case .subscribe(let filter, let since, let stream, let all):
            if let since, let stream, stream == self.fanout.stream, since > self.fanout.seq {
                self.reply(
                    client,
                    ProtocolError(
                        .invalidValue,
                        "\"since\" \(since) is beyond the last seq \(self.fanout.seq) of stream \(stream): give the last seq you received in it",
                        id: id))
                return
            }
            self.setSubscription(client, subscribed: true, filter: filter, wire: all)
            self.ok(client, id, SubscribeResult(subscribed: true, seq: self.fanout.seq, stream: self.fanout.stream, filter: filter).json)
            if let since { self.fanout.replay(to: client, since: since, stream: stream) }
        case .unsubscribe:
            self.setSubscription(client, subscribed: false, filter: nil)
            self.ok(client, id, SubscribeResult(subscribed: false).json)
        case .status:
            self.ok(client, id, self.statusReport(askedBy: client).json)
        case .metrics:
            self.ok(client, id, MetricsResult(text: String(decoding: self.metricsText(askedBy: client), as: UTF8.self)).json)
        case .send(let payload, let sticky?):
            self.stick(sticky, payload, id: id, from: client)
        case .sticky:
            self.ok(client, id, self.session.list.json)
        case .clearSetAside:
            guard let appProtocol = self.appProtocol else {
                self.reply(client, ProtocolError(.invalidValue, "upstream.protocol is raw: nothing is ever set aside", id: id))
                return
            }
            let count = appProtocol.clearSetAside(link: link)
            self.logger.notice("\(count) set-aside subscription\(count == 1 ? "" : "s") cleared: sent again")
            self.ok(client, id, ["cleared": .number(JSONNumber(count))])
        case .unstick(let key, let text, let scope):
            self.unstick(key, leave: text, scope: scope, id: id, from: client)
        case .send(let payload, nil) where self.appProtocol != nil:
            self.sendThroughProtocol(payload, id: id, from: client, through: self.appProtocol!)
        case .send(let payload, nil):
            self.answerSend(link.send(UpstreamMessage(payload)), id: id, to: client)
        case .close(let code, let reason):
            let was = link.phase
            link.close(code: code, reason: reason)
            self.ok(client, id, LinkStateResult(state: link.phase, was: was).json)
        case .connect:
            let was = link.phase
            link.connect()
            self.ok(client, id, LinkStateResult(state: link.phase, was: was).json)
        case .reconnect:
            let was = link.phase
            link.reconnect()
            self.ok(client, id, LinkStateResult(state: link.phase, was: was).json)
        case .request(let payload, let match, let timeout):
            self.request(payload, match: match, timeout: timeout, id: id, from: client)
        }
    }

    /// `send` with an application protocol: the message goes through the protocol layer, which
    /// rewrites its ids (or answers it itself), and its answers come back to this client only.
    private func sendThroughProtocol(_ payload: Payload, id: JSONValue?, from client: LocalClient, through appProtocol: AppProtocolLayer) {
        let name = self.configuration.applicationProtocol.kind.rawValue
        let views: [JSONValue]
        switch self.appMessages(payload) {
        case .failure(let problem):
            self.reply(client, ProtocolError(.invalidValue, problem.description, id: id))
            return
        case .success(let parsed):
            views = parsed
        }
        let performed = appProtocol.fromApp(client, views, link: self.link)
        if let refusal = performed.refusal {
            self.reply(client, ProtocolError(.invalidValue, "\(name): \(refusal)", id: id))
            return
        }
        guard let outcome = performed.sent else {
            // Answered here, or (a subscription, the link down) kept for the next open.
            let phase = self.link.phase
            self.ok(client, id, performed.delivered || phase == .open ? SendResult.answered.json : SendResult.queued(depth: 0, state: phase).json)
            return
        }
        self.answerSend(outcome, id: id, to: client)
    }

    /// An app's `text` as the protocol's messages (their views), or what is wrong with it.
    private func appMessages(_ payload: Payload) -> Result<[JSONValue], ProtocolSyntaxError> {
        guard let session = self.appProtocol?.session else { return .failure(ProtocolSyntaxError("upstream.protocol is raw")) }
        let name = session.name
        let syntax = session.isText ? "text in that protocol's syntax" : "one JSON message of that protocol (as text)"
        guard case .text(let text) = payload else {
            return .failure(ProtocolSyntaxError("upstream.protocol is \(name): send \(syntax), not binary, or set upstream.protocol = \"raw\""))
        }
        switch session.parse(app: text) {
        case .success(let views): return .success(views)
        case .failure(let error):
            return .failure(ProtocolSyntaxError("upstream.protocol is \(name): send \(syntax) (\(error)), or set upstream.protocol = \"raw\""))
        }
    }

    /// The reply to a `send`: now, or once the spool has it (later replies to this client wait
    /// their turn).
    private func answerSend(_ outcome: SendOutcome, id: JSONValue?, to client: LocalClient) {
        if case .spooling(let stored) = outcome {
            let ticket = client.holdReply()
            stored.assumeIsolated().whenSuccess { outcome in client.fillReply(ticket, self.sendReply(outcome, id: id)) }
        } else {
            client.send(self.sendReply(outcome, id: id))
        }
    }

    private func request(_ payload: Payload, match: Filter?, timeout: Duration, id: JSONValue?, from client: LocalClient) {
        // An answer cannot come while the link is down: say so now, and send nothing (a queued
        // request would go out later with nobody waiting for its answer).
        guard self.link.phase == .open else {
            let phase = self.link.phase
            let next = phase == .idle ? "`wsbridgectl connect` opens it" : "retry once status says open"
            self.reply(
                client,
                ProtocolError(
                    .notConnected, "the upstream link is \(phase.rawValue), so the request was not sent: \(next); `send` queues a message instead", id: id)
            )
            return
        }
        let local = self.configuration.local
        let mine = self.fanout.pending.count(of: client) + (self.appProtocol?.requests.count(of: client) ?? 0)
        let all = self.fanout.pending.count + (self.appProtocol?.requests.count ?? 0)
        guard mine < local.maxPendingRequests, all < local.maxPendingRequestsTotal else {
            let which =
                mine >= local.maxPendingRequests
                ? "this client already has \(mine) requests waiting (local.max_pending_requests)"
                : "\(all) requests are waiting in all (local.max_pending_requests_total)"
            self.reply(client, ProtocolError(.tooManyRequests, "\(which): wait for an answer or a timeout, then retry", id: id))
            return
        }
        guard let match else {
            guard let appProtocol = self.appProtocol else {
                self.reply(
                    client,
                    ProtocolError(
                        .missingField,
                        "missing \"match\": with upstream.protocol = \"raw\" the daemon cannot tell which message answers, so say it: {\"field\": \"id\", \"equals\": 7}",
                        id: id))
                return
            }
            self.requestThroughProtocol(payload, timeout: timeout, id: id, from: client, through: appProtocol)
            return
        }
        // Listen first, so a fast answer cannot be missed.
        let key = self.fanout.pending.wait(PendingRequests.Entry(client: client, id: id, match: match), timeout: timeout) { entry in
            let what = match.equals.map { "\(match.field) == \($0.serialized)" } ?? "a \(match.field) field"
            self.reply(
                entry.client,
                ProtocolError(.timeout, "no upstream message with \(what) arrived within \(timeout.short); raise \"timeout\" or check the match", id: entry.id)
            )
        }
        switch self.link.send(UpstreamMessage(payload)) {
        case .rejected(let problem):
            self.fanout.pending.cancel(key)
            self.reply(client, ProtocolError(.queueFull, problem, id: id))
        case .spooling(let stored):
            stored.assumeIsolated().whenSuccess { outcome in
                guard case .rejected(let problem) = outcome, self.fanout.pending.cancel(key) else { return }
                self.reply(client, ProtocolError(.queueFull, problem, id: id))
            }
        case .sent, .queued:
            break
        }
    }

    /// A `request` without `match`: the application protocol's id says what answers it.
    private func requestThroughProtocol(_ payload: Payload, timeout: Duration, id: JSONValue?, from client: LocalClient, through appProtocol: AppProtocolLayer)
    {
        let name = appProtocol.session.name
        guard case .success(let views) = self.appMessages(payload), views.count == 1, let json = views.first,
            let wire = appProtocol.session.requestID(in: json)
        else {
            self.reply(
                client,
                ProtocolError(
                    .invalidValue,
                    "a request without \"match\" is answered by its id: send one \(name) message that carries an id (or give \"match\")",
                    id: id))
            return
        }
        if appProtocol.requests.isWaiting(client, wire.key) {
            self.reply(client, ProtocolError(.invalidValue, "\(name): a request with id \(wire) is waiting already: use another id", id: id))
            return
        }
        // Listen first: a local answer comes while the message goes through the protocol layer.
        appProtocol.requests.wait(client, key: wire.key, id: id, timeout: timeout) { _ in
            _ = appProtocol.withSession { session in
                session.forget(client.id, id: wire)
                return []
            }
            self.reply(
                client,
                ProtocolError(
                    .timeout, "no upstream message with id \(wire) arrived within \(timeout.short); raise \"timeout\", or check the server got it", id: id))
        }
        let performed = appProtocol.fromApp(client, json, link: self.link)
        var problem: (ErrorCode, String)?
        if let refusal = performed.refusal {
            problem = (.invalidValue, "\(name): \(refusal)")
        } else if case .rejected(let reason) = performed.sent {
            problem = (.queueFull, reason)
        }
        guard let (code, message) = problem else { return }
        appProtocol.requests.cancel(client, key: wire.key)
        self.reply(client, ProtocolError(code, message, id: id))
    }

    // MARK: - Sticky sends

    /// Registers a sticky send; its text goes now if the link is open, else after the next open.
    private func stick(_ options: StickyOptions, _ payload: Payload, id: JSONValue?, from client: LocalClient) {
        if let appProtocol = self.appProtocol, case .success(let views) = self.appMessages(payload), views.count == 1, let json = views.first,
            appProtocol.session.requestID(in: json) != nil
        {
            self.stickThroughProtocol(options, json, id: id, from: client, through: appProtocol)
            return
        }
        let registered = self.session.register(options, payload: payload, client: client.id, pid: client.credentials?.pid, uid: client.credentials?.uid)
        let outcome: StickyRegistry.Registered
        let holders: Int
        switch registered {
        case .failure(var error):
            error.id = id
            self.reply(client, error)
            return
        case .success(let r):
            (outcome, holders) = r
        }
        let status: StickyResult.Status
        if outcome.sends {
            status = self.link.sendAhead(UpstreamMessage(payload)) ? .sent : .queued
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
        let performed = appProtocol.stickyFromApp(holder, json, key: options.key, link: self.link)
        if let refusal = performed.refusal {
            self.reply(client, ProtocolError(.invalidValue, "\(name): \(refusal)", id: id))
            return
        }
        let status: StickyResult.Status = performed.sent != nil ? .sent : (self.link.phase == .open ? .held : .queued)
        let holders = appProtocol.session.stickyHolders(options.key) ?? 1
        let result = StickyResult(status: status, key: options.key, scope: options.scope, holders: holders, state: self.link.phase)
        self.ok(client, id, SendResult.sticky(result).json)
    }

    private func unstick(_ key: String, leave: String?, scope: StickyScope?, id: JSONValue?, from client: LocalClient) {
        if let appProtocol = self.appProtocol {
            let holder = scope == .daemon ? AppID.everyone : client.id
            if let performed = appProtocol.stickyRelease(holder, key: key, link: self.link) {
                let holders = appProtocol.session.stickyHolders(key) ?? 0
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
            result = UnstickResult(key: key, holders: 0, leave: self.sendLeave(text))
        }
        let line = MessageLineEncoder.line(ReplyLine.ok(id: id, result.json).json, allocator: self.allocator)
        self.replyOnceStored(client, line, id: id)
    }

    /// A client's keys go with it; the leave texts of keys nobody holds any more go upstream.
    func releaseSticky(of client: LocalClient) {
        for message in self.session.clientGone(client.id) {
            if !self.link.sendAhead(message) {
                self.logger.debug("a sticky key's leave text was not sent: the link is not open, and the next connection never had the key")
            }
        }
    }

    /// `sent`, `none` or `skipped` (the link is not open: the next connection never had the key).
    private func sendLeave(_ text: String?) -> String {
        guard let text else { return "none" }
        return self.link.sendAhead(UpstreamMessage(.text(text))) ? "sent" : "skipped"
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
    private func sendReply(_ outcome: SendOutcome, id: JSONValue?) -> ByteBuffer {
        let json: JSONValue
        switch outcome {
        case .sent:
            let line = Self.sentReply.line(id: id)
            var buffer = self.allocator.buffer(capacity: line.count)
            buffer.writeBytes(line)
            return buffer
        case .queued(let depth): json = ReplyLine.ok(id: id, SendResult.queued(depth: depth, state: self.link.phase).json).json
        case .rejected(let problem): json = ProtocolError(.queueFull, problem, id: id).reply
        case .spooling: json = ProtocolError(.internalError, "bug: a send was answered before the spool stored it", id: id).reply
        }
        return MessageLineEncoder.line(json, allocator: self.allocator)
    }
}

/// Turns one request line into a `Request`, or the error reply that says what to fix.
enum RequestDecoding {
    /// nil for a blank line (ignored).
    static func decode(_ input: LocalLine, limits: RequestLimits) -> Result<Request, ProtocolError>? {
        switch input {
        case .tooLong(let limit):
            return .failure(
                ProtocolError(
                    .lineTooLong, "request line longer than local.max_line (\(limit) bytes): it was discarded up to its newline; send smaller requests")
            )
        case .line(let line):
            if line.readableBytes == 0 { return nil }
            // The link's own validator (eight ASCII bytes at a time), not the standard library's
            // generic one.
            var utf8 = UTF8Validator()
            let valid = line.withUnsafeReadableBytes { utf8.feed($0) } && utf8.isComplete
            guard valid else {
                return .failure(ProtocolError(.invalidUTF8, "the request line is not valid UTF-8: send UTF-8 encoded JSON"))
            }
            do {
                let json = try JSONValue.parse(line.readableBytesView)
                return .success(try Request.decode(json, limits: limits))
            } catch let error as JSONParseError {
                return .failure(ProtocolError(.invalidJSON, "\(error.description); each line must be one JSON object such as {\"id\":1,\"op\":\"status\"}"))
            } catch let error as ProtocolError {
                return .failure(error)
            } catch {
                return .failure(ProtocolError(.internalError, "\(error)"))
            }
        }
    }
}
