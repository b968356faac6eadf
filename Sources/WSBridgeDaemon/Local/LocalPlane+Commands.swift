import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// The command router: a client's request line is decoded, authorized and executed against the
/// link and the fan-out; every outcome is one reply line.
extension LocalPlane {
    func handle(_ input: LocalLine, from client: LocalClient) {
        let line: ByteBuffer
        switch RequestDecoding.line(input) {
        case .none:
            return  // blank line
        case .failure(let error)?:
            self.reply(client, error)
            return
        case .success(let l)?:
            line = l
        }
        // The common `send`, read in one pass with no request built (SendLine): raw, its text
        // goes as it is; with a protocol, through the protocol's layer as any send's.
        if client.mayWrite, let send = SendLine.scan(line) {
            if self.appProtocol == nil {
                self.answerSend(self.link.send(OutboundMessage(kind: .text, data: send.text)), id: send.id, to: client)
            } else {
                self.sendThroughProtocol(.text(String(buffer: send.text)), id: send.id, from: client)
            }
            return
        }
        let request: Request
        switch RequestDecoding.request(line, limits: self.requestLimits) {
        case .failure(let error):
            self.reply(client, error)
            return
        case .success(let r):
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

    func ok(_ client: LocalClient, _ id: JSONValue?, _ result: JSONValue) {
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
            let position = self.fanout.position
            if let since, let stream, stream == position.stream, since > position.seq {
                self.reply(
                    client,
                    ProtocolError(
                        .invalidValue,
                        "\"since\" \(since) is beyond the last seq \(position.seq) of stream \(stream): give the last seq you received in it",
                        id: id))
                return
            }
            self.setSubscription(client, subscribed: true, filter: filter, wire: all)
            self.ok(client, id, SubscribeResult(subscribed: true, seq: position.seq, stream: position.stream, filter: filter).json)
            if let since { self.fanout.replay(to: client, since: since, stream: stream) }
        case .unsubscribe:
            self.setSubscription(client, subscribed: false, filter: nil)
            self.ok(client, id, SubscribeResult(subscribed: false).json)
        case .status:
            self.ok(client, id, self.statusReport(askedBy: client).json)
        case .clients:
            self.ok(client, id, self.clientList.json)
        case .metrics:
            self.ok(client, id, MetricsResult(text: String(decoding: self.metricsText(askedBy: client), as: UTF8.self)).json)
        case .send(let payload, let sticky?):
            self.stick(sticky, payload, id: id, from: client)
        case .sticky:
            self.ok(client, id, self.session.list.json)
        case .clearSetAside:
            guard self.appProtocol != nil else {
                self.reply(client, ProtocolError(.invalidValue, "upstream.protocol is raw: nothing is ever set aside", id: id))
                return
            }
            let count = self.protocolClearSetAside()
            self.logger.notice("\(count) set-aside subscription\(count == 1 ? "" : "s") cleared: sent again")
            self.ok(client, id, ["cleared": .number(JSONNumber(count))])
        case .unstick(let key, let text, let scope):
            self.unstick(key, leave: text, scope: scope, id: id, from: client)
        case .send(let payload, nil) where self.appProtocol != nil:
            self.sendThroughProtocol(payload, id: id, from: client)
        case .send(let payload, nil):
            self.answerSend(link.send(OutboundMessage(payload)), id: id, to: client)
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
    private func sendThroughProtocol(_ payload: Payload, id: JSONValue?, from client: LocalClient) {
        let name = self.configuration.applicationProtocol.kind.rawValue
        guard let views = self.protocolMessages(payload, id: id, for: client) else { return }
        let performed = self.throughProtocol(client.id, views)
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
    /// The protocol's messages in `payload`, or nil once `client` was told why it has none.
    func protocolMessages(_ payload: Payload, id: JSONValue?, for client: LocalClient) -> [JSONValue]? {
        switch self.appMessages(payload) {
        case .failure(let problem):
            self.reply(client, ProtocolError(.invalidValue, problem.description, id: id))
            return nil
        case .success(let views):
            return views
        }
    }

    func appMessages(_ payload: Payload) -> Result<[JSONValue], AppProtocolSyntaxError> {
        guard let session = self.appProtocol?.session else { return .failure(AppProtocolSyntaxError("upstream.protocol is raw")) }
        let name = session.name
        let syntax = session.codec.isText ? "text in that protocol's syntax" : "one JSON message of that protocol (as text)"
        guard case .text(let text) = payload else {
            return .failure(AppProtocolSyntaxError("upstream.protocol is \(name): send \(syntax), not binary, or set upstream.protocol = \"raw\""))
        }
        switch session.codec.parse(app: text) {
        case .success(let views): return .success(views)
        case .failure(let error):
            return .failure(AppProtocolSyntaxError("upstream.protocol is \(name): send \(syntax) (\(error)), or set upstream.protocol = \"raw\""))
        }
    }

    /// The reply to a `send`: now, or once the spool has it (later replies to this client wait
    /// their turn).
    func answerSend(_ outcome: SendOutcome, id: JSONValue?, to client: LocalClient) {
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
        let mine = self.pending.count(of: client)
        let all = self.pending.count
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
        let key = self.pending.wait(PendingRequests.Entry(client: client, id: id, match: match), timeout: timeout) { entry in
            let what = match.equals.map { "\(match.field) == \($0.serialized)" } ?? "a \(match.field) field"
            self.reply(
                entry.client,
                ProtocolError(.timeout, "no upstream message with \(what) arrived within \(timeout.short); raise \"timeout\" or check the match", id: entry.id)
            )
        }
        switch self.link.send(OutboundMessage(payload)) {
        case .rejected(let problem):
            self.pending.cancel(key)
            self.reply(client, ProtocolError(.queueFull, problem, id: id))
        case .spooling(let stored):
            stored.assumeIsolated().whenSuccess { outcome in
                guard case .rejected(let problem) = outcome, self.pending.cancel(key) else { return }
                self.reply(client, ProtocolError(.queueFull, problem, id: id))
            }
        case .sent, .queued:
            break
        }
    }

    /// A `request` without `match`: the application protocol's id says what answers it.
    private func requestThroughProtocol(_ payload: Payload, timeout: Duration, id: JSONValue?, from client: LocalClient, through first: AppProtocolLayer) {
        let name = first.session.name
        guard case .success(let views) = self.appMessages(payload), views.count == 1, let json = views.first,
            let wire = first.session.requestID(in: json)
        else {
            self.reply(
                client,
                ProtocolError(
                    .invalidValue,
                    "a request without \"match\" is answered by its id: send one \(name) message that carries an id (or give \"match\")",
                    id: id))
            return
        }
        // With a pool: the connection the request goes on (a call with an id in use goes where it is).
        let appProtocol: AppProtocolLayer
        let link: any LinkControl
        switch self.protocolMember(for: client.id, json) {
        case .failure(let full):
            self.reply(client, ProtocolError(.invalidValue, "\(name): \(full)", id: id))
            return
        case .success(let member):
            (appProtocol, link) = (member.layer, member.link)
        }
        if self.pending.isWaiting(client, wire.key) {
            self.reply(client, ProtocolError(.invalidValue, "\(name): a request with id \(wire) is waiting already: use another id", id: id))
            return
        }
        // Listen first: a local answer comes while the message goes through the protocol layer.
        self.pending.waitForAnswer(client, key: wire.key, id: id, timeout: timeout) {
            _ = appProtocol.withSession { session in
                session.forget(client.id, id: wire)
                return []
            }
            self.reply(
                client,
                ProtocolError(
                    .timeout, "no upstream message with id \(wire) arrived within \(timeout.short); raise \"timeout\", or check the server got it", id: id))
        }
        let performed = appProtocol.fromApp(client.id, json, link: link)
        self.protocolMembers?.settle()
        if case .spooling(let stored) = performed.sent {
            // A fleet follower's: the bridge's layer may refuse it.
            stored.assumeIsolated().whenSuccess { outcome in
                guard case .rejected(let reason) = outcome, self.pending.cancelAnswer(client, key: wire.key) else { return }
                self.reply(client, ProtocolError(.invalidValue, reason, id: id))
            }
        }
        var problem: (ErrorCode, String)?
        if let refusal = performed.refusal {
            problem = (.invalidValue, "\(name): \(refusal)")
        } else if case .rejected(let reason) = performed.sent {
            problem = (.queueFull, reason)
        }
        guard let (code, message) = problem else { return }
        self.pending.cancelAnswer(client, key: wire.key)
        self.reply(client, ProtocolError(code, message, id: id))
    }
}
