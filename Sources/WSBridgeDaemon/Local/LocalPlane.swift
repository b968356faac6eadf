import ExtrasBase64
import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// The local plane: every client of the Unix socket, the sequence of upstream messages, the
/// replay ring, and the commands. Confined to the same event loop as the upstream link, so an
/// upstream message reaches every subscriber's queue without a hop, a lock or a copy.
final class LocalPlane {
    private let eventLoop: any EventLoop
    private var configuration: Configuration
    private let logger: Logger
    var link: UpstreamLink?

    private var clients: [Int: LocalClient] = [:]
    private var nextClientID = 0
    private(set) var seq: UInt64 = 0
    /// Recent message lines for `since`, bounded by `local.replay` and `local.replay_bytes`.
    private var ring = CircularBuffer<(seq: UInt64, line: ByteBuffer)>()
    private var ringBytes = 0
    private var drops: UInt64 = 0
    private var pending: [Int: PendingRequest] = [:]
    private var nextPendingID = 0
    private let allocator = ByteBufferAllocator()
    private(set) var phase: ConnectionPhase = .idle
    private var filtersInUse = 0
    /// Connections refused (over `local.max_clients`) since the last log line.
    private var refusedSinceLog = 0
    /// Called when something STATUS= shows changed (state, RTT, subscribers).
    var statusChanged: (() -> Void)?
    private(set) var lastRTT: Duration?

    private struct PendingRequest {
        var client: LocalClient
        var id: JSONValue?
        var match: Filter
        var timer: Scheduled<Void>
    }

    init(configuration: Configuration, eventLoop: any EventLoop, logger: Logger) {
        self.configuration = configuration
        self.eventLoop = eventLoop
        self.logger = logger
    }

    func makeClient(credentials: PeerCredentials?) -> LocalClient {
        self.nextClientID += 1
        let mayWrite = credentials?.mayWrite(self.configuration.access) ?? false
        return LocalClient(
            id: self.nextClientID,
            credentials: credentials,
            mayWrite: mayWrite,
            plane: self,
            limits: self.configuration.local
        )
    }

    var subscriberCount: Int { self.clients.values.filter(\.subscribed).count }
    var clientCount: Int { self.clients.count }

    func update(configuration: Configuration) {
        self.configuration = configuration
        for client in self.clients.values {
            client.updateLimits(configuration.local)
            client.mayWrite = client.credentials?.mayWrite(configuration.access) ?? false
        }
        self.trimRing()
    }

    /// Tells every client the daemon is stopping, flushes what each can take, and closes them.
    func shutdown() -> EventLoopFuture<Void> {
        let notice = MessageLineEncoder.line(
            ["type": "state", "state": "stopped", "reason": "wsbridged is stopping", "ts": .number(JSONNumber(WallClock.millisecondsSinceEpoch()))],
            allocator: self.allocator
        )
        // The link's own `stopped` state line normally went out already.
        let closed = self.clients.values.compactMap { $0.finish(self.phase == .stopped ? nil : notice) }
        return EventLoopFuture.andAllComplete(closed, on: self.eventLoop)
    }

    /// A short summary for systemd's STATUS=: "open wss://host, rtt 12 ms, 3 subscribers".
    func statusSummary() -> String {
        let url = self.configuration.upstream.url
        var parts = ["\(self.phase.rawValue) \(url.scheme.rawValue)://\(url.hostHeader)"]
        if self.phase == .open, let rtt = self.lastRTT {
            parts.append("rtt \(Int((rtt.seconds * 1000).rounded())) ms")
        }
        let n = self.subscriberCount
        parts.append("\(n) subscriber\(n == 1 ? "" : "s")")
        return parts.joined(separator: ", ")
    }

    // MARK: - Clients

    func added(_ client: LocalClient) {
        let limit = self.configuration.local.maxClients
        guard self.clients.count < limit else {
            let error = ProtocolError(
                .tooManyClients,
                "wsbridged already serves local.max_clients = \(limit) clients; close idle ones or raise local.max_clients"
            )
            client.close(saying: MessageLineEncoder.line(error.reply, allocator: self.allocator))
            if self.refusedSinceLog == 0 {
                self.logger.warning("refusing local clients: local.max_clients = \(limit) reached", metadata: ["local.max_clients": "\(limit)"])
            }
            self.refusedSinceLog += 1
            return
        }
        if self.refusedSinceLog > 0, self.clients.count < limit * 9 / 10 {
            self.logger.notice("accepting local clients again after refusing \(self.refusedSinceLog)")
            self.refusedSinceLog = 0
        }
        self.clients[client.id] = client
        let hello: JSONValue = [
            "type": "hello", "protocol": .number(JSONNumber(WireProtocol.version)), "version": .string(WSBridgeVersion.current),
            "state": .string(self.phase.rawValue), "seq": .number(JSONNumber(self.seq)), "subscribed": true,
            "write": .bool(client.mayWrite),
        ]
        client.send(MessageLineEncoder.line(hello, allocator: self.allocator))
        self.statusChanged?()
        self.logger.debug(
            "client connected",
            metadata: ["client.id": "\(client.id)", "client.uid": "\(client.credentials.map { String($0.uid) } ?? "?")", "client.write": "\(client.mayWrite)"]
        )
    }

    func removed(_ client: LocalClient) {
        guard self.clients.removeValue(forKey: client.id) != nil else { return }
        if client.filter != nil { self.filtersInUse -= 1 }
        for (key, p) in self.pending where p.client === client {
            client.pendingRequests -= 1
            p.timer.cancel()
            self.pending.removeValue(forKey: key)
        }
        self.statusChanged?()
        self.logger.debug("client disconnected", metadata: ["client.id": "\(client.id)"])
    }

    func countDrops(_ n: Int) {
        self.drops += UInt64(n)
    }

    /// Closes a client that broke a bound, with a last line and a log line saying why.
    func disconnect(_ client: LocalClient, because reason: String) {
        self.logger.warning("disconnecting local client: \(reason)", metadata: ["client.id": "\(client.id)"])
        let error = ProtocolError(.outputNotRead, "disconnected: \(reason); read what the daemon sends")
        client.close(saying: MessageLineEncoder.line(error.reply, allocator: self.allocator))
    }

    /// accept(2) failed (out of file descriptors, most often), the first time since clients were
    /// last accepted. Returns how long the listener pauses before each new try.
    func acceptFailed(_ error: IOError) -> TimeAmount {
        self.logger.error(
            "cannot accept local clients: \(error); retrying every 200 ms. Raise LimitNOFILE= or lower local.max_clients (\(self.configuration.local.maxClients))"
        )
        return .milliseconds(200)
    }

    func acceptRecovered() {
        self.logger.notice("accepting local clients again")
    }

    // MARK: - Upstream events

    func handle(_ event: UpstreamEvent) {
        switch event {
        case .message(let message):
            self.publish(message)
        case .state(let phase, let reason):
            self.phase = phase
            let line = MessageLineEncoder.line(
                ["type": "state", "state": .string(phase.rawValue), "reason": .string(reason), "ts": .number(JSONNumber(WallClock.millisecondsSinceEpoch()))],
                allocator: self.allocator
            )
            for client in self.clients.values where client.subscribed {
                client.send(line)
            }
            self.statusChanged?()
        case .roundTrip(let rtt):
            self.lastRTT = rtt
            self.statusChanged?()
        case .attempt, .retryScheduled:
            break
        }
    }

    private func publish(_ message: UpstreamMessage) {
        self.seq += 1
        let seq = self.seq
        // Parse the payload only if someone needs it: inline JSON, a filter, or a request.
        var parsed: JSONValue?
        if message.kind == .text && (self.configuration.local.inlineJSON || self.filtersInUse > 0 || !self.pending.isEmpty) {
            parsed = try? JSONValue.parse(message.data.readableBytesView)
        }
        let line = MessageLineEncoder.message(
            seq: seq,
            message,
            inlineJSON: self.configuration.local.inlineJSON,
            parsed: parsed,
            allocator: self.allocator
        )
        if self.configuration.local.replay > 0 && self.configuration.local.replayBytes > 0 {
            self.ring.append((seq, line))
            self.ringBytes += line.readableBytes
            self.trimRing()
        }
        for client in self.clients.values where client.subscribed {
            if let filter = client.filter {
                guard let parsed, filter.matches(parsed) else { continue }
            }
            client.deliver(line, seq: seq)
        }
        if !self.pending.isEmpty, let parsed {
            for (key, p) in self.pending where p.match.matches(parsed) {
                p.timer.cancel()
                self.pending.removeValue(forKey: key)
                p.client.pendingRequests -= 1
                var result: [(String, JSONValue)] = [("seq", .number(JSONNumber(seq))), ("kind", "text")]
                result.append(("json", parsed))
                p.client.send(MessageLineEncoder.line(Reply.ok(id: p.id, .object(result)), allocator: self.allocator))
            }
        }
    }

    // MARK: - Requests

    func handle(_ input: LocalLine, from client: LocalClient) {
        let request: Request
        switch input {
        case .tooLong(let limit):
            self.reply(client, ProtocolError(.lineTooLong, "request line longer than local.max_line (\(limit) bytes): it was discarded up to its newline; send smaller requests"))
            return
        case .line(let line):
            if line.readableBytes == 0 { return }  // blank lines are ignored
            let valid = line.withUnsafeReadableBytes { String(validating: $0.bindMemory(to: UInt8.self), as: UTF8.self) != nil }
            guard valid else {
                self.reply(client, ProtocolError(.invalidUTF8, "the request line is not valid UTF-8: send UTF-8 encoded JSON"))
                return
            }
            do {
                let json = try JSONValue.parse(line.readableBytesView)
                request = try Request.decode(json, limits: self.requestLimits)
            } catch let error as JSONParseError {
                self.reply(client, ProtocolError(.invalidJSON, "\(error.description); each line must be one JSON object such as {\"id\":1,\"op\":\"status\"}"))
                return
            } catch let error as ProtocolError {
                self.reply(client, error)
                return
            } catch {
                self.reply(client, ProtocolError(.internalError, "\(error)"))
                return
            }
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

    private func reply(_ client: LocalClient, _ error: ProtocolError) {
        client.send(MessageLineEncoder.line(error.reply, allocator: self.allocator))
    }

    private func ok(_ client: LocalClient, _ id: JSONValue?, _ result: JSONValue = .object([])) {
        client.send(MessageLineEncoder.line(Reply.ok(id: id, result), allocator: self.allocator))
    }

    private func execute(_ request: Request, from client: LocalClient) {
        let id = request.id
        guard let link = self.link else {
            self.reply(client, ProtocolError(.shuttingDown, "the upstream link is not running", id: id))
            return
        }
        switch request.command {
        case .subscribe(let filter, let since):
            if client.filter != nil { self.filtersInUse -= 1 }
            client.filter = filter
            if filter != nil { self.filtersInUse += 1 }
            client.subscribed = true
            var result: [(String, JSONValue)] = [("subscribed", true), ("seq", .number(JSONNumber(self.seq)))]
            if let filter { result.append(("filter", filter.json)) }
            self.ok(client, id, .object(result))
            if let since { self.replay(to: client, since: since) }
        case .unsubscribe:
            if client.filter != nil { self.filtersInUse -= 1 }
            client.filter = nil
            client.subscribed = false
            self.ok(client, id, ["subscribed": false])
        case .status:
            self.ok(client, id, self.statusJSON(link.status))
        case .send(let payload):
            switch link.submit(Self.message(payload)) {
            case .sent: self.ok(client, id, ["status": "sent"])
            case .queued(let depth): self.ok(client, id, ["status": "queued", "queued": .number(JSONNumber(depth)), "state": .string(link.phase.rawValue)])
            case .rejected(let problem): self.reply(client, ProtocolError(.queueFull, problem, id: id))
            }
        case .close(let code, let reason):
            link.close(code: code, reason: reason)
            self.ok(client, id, ["state": .string(link.phase.rawValue)])
        case .connect:
            link.connect()
            self.ok(client, id, ["state": .string(link.phase.rawValue)])
        case .reconnect:
            link.reconnect()
            self.ok(client, id, ["state": .string(link.phase.rawValue)])
        case .request(let payload, let match, let timeout):
            let local = self.configuration.local
            guard client.pendingRequests < local.maxPendingRequests, self.pending.count < local.maxPendingRequestsTotal else {
                let which =
                    client.pendingRequests >= local.maxPendingRequests
                    ? "this client already has \(client.pendingRequests) requests waiting (local.max_pending_requests)"
                    : "\(self.pending.count) requests are waiting in all (local.max_pending_requests_total)"
                self.reply(client, ProtocolError(.tooManyRequests, "\(which): wait for an answer or a timeout, then retry", id: id))
                return
            }
            self.nextPendingID += 1
            let key = self.nextPendingID
            let timer = self.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(timeout.nanoseconds)) {
                guard let p = self.pending.removeValue(forKey: key) else { return }
                p.client.pendingRequests -= 1
                let what = match.equals.map { "\(match.field) == \($0.serialized)" } ?? "a \(match.field) field"
                self.reply(p.client, ProtocolError(.timeout, "no upstream message with \(what) arrived within \(timeout.short); raise \"timeout\" or check the match", id: p.id))
            }
            // Listen first, so a fast answer cannot be missed.
            self.pending[key] = PendingRequest(client: client, id: id, match: match, timer: timer)
            client.pendingRequests += 1
            if case .rejected(let problem) = link.submit(Self.message(payload)) {
                timer.cancel()
                self.pending.removeValue(forKey: key)
                client.pendingRequests -= 1
                self.reply(client, ProtocolError(.queueFull, problem, id: id))
            }
        }
    }

    private static func message(_ payload: Payload) -> UpstreamMessage {
        switch payload {
        case .text(let t): UpstreamMessage(kind: .text, data: ByteBuffer(string: t), receivedAtMillis: 0)
        case .binary(let b): UpstreamMessage(kind: .binary, data: ByteBuffer(bytes: b), receivedAtMillis: 0)
        }
    }

    /// Resends buffered messages after `since`; what is no longer buffered is reported as a gap.
    private func replay(to client: LocalClient, since: UInt64) {
        guard since < self.seq else { return }
        let oldest = self.ring.first?.seq ?? (self.seq + 1)
        if since + 1 < oldest {
            let gap: JSONValue = [
                "type": "gap", "from": .number(JSONNumber(since + 1)), "to": .number(JSONNumber(oldest - 1)),
                "reason": .string(
                    "no longer buffered: the replay ring keeps the last \(self.configuration.local.replay) messages (local.replay) up to \(self.configuration.local.replayBytes) bytes (local.replay_bytes)"
                ),
            ]
            client.send(MessageLineEncoder.line(gap, allocator: self.allocator))
        }
        for entry in self.ring where entry.seq > since {
            if let filter = client.filter {
                guard let parsed = Self.payloadJSON(ofLine: entry.line), filter.matches(parsed) else { continue }
            }
            client.deliver(entry.line, seq: entry.seq)
        }
    }

    private var requestLimits: RequestLimits {
        RequestLimits(filterMaxBytes: self.configuration.local.filterMaxBytes, filterMaxDepth: self.configuration.local.filterMaxDepth)
    }

    /// Keeps the replay ring within `local.replay` messages and `local.replay_bytes` bytes.
    private func trimRing() {
        let local = self.configuration.local
        while let oldest = self.ring.first, self.ring.count > local.replay || self.ringBytes > local.replayBytes {
            self.ringBytes -= oldest.line.readableBytes
            self.ring.removeFirst()
        }
    }

    /// The JSON payload of an encoded message line (for filters on replayed messages).
    private static func payloadJSON(ofLine line: ByteBuffer) -> JSONValue? {
        guard let message = try? JSONValue.parse(line.readableBytesView) else { return nil }
        if let inline = message["json"] { return inline }
        guard message["kind"] == "text", let text = message["data"]?.stringValue else { return nil }
        return try? JSONValue.parse(text)
    }

    private func statusJSON(_ s: LinkStatus) -> JSONValue {
        var fields: [(String, JSONValue)] = [
            ("state", .string(s.phase)),
            ("since", .number(JSONNumber(s.sinceMillis))),
            ("url", .string(s.url)),
            ("reconnects", .number(JSONNumber(s.reconnects))),
            ("failed_attempts", .number(JSONNumber(s.failures))),
            ("rtt_ms", s.rttMillis.map { .number(JSONNumber(($0 * 1000).rounded() / 1000)) } ?? .null),
            ("subprotocol", s.subprotocol.map { .string($0) } ?? .null),
            ("compression", .bool(s.compression)),
            ("messages_in", .number(JSONNumber(s.messagesIn))),
            ("bytes_in", .number(JSONNumber(s.bytesIn))),
            ("messages_out", .number(JSONNumber(s.messagesOut))),
            ("bytes_out", .number(JSONNumber(s.bytesOut))),
            ("subscribers", .number(JSONNumber(self.subscriberCount))),
            ("clients", .number(JSONNumber(self.clientCount))),
            ("seq", .number(JSONNumber(self.seq))),
            ("drops", .number(JSONNumber(self.drops))),
            (
                "queue",
                [
                    "messages": .number(JSONNumber(s.queuedMessages)), "bytes": .number(JSONNumber(s.queuedBytes)),
                    "max_messages": .number(JSONNumber(s.queueMaxMessages)), "max_bytes": .number(JSONNumber(s.queueMaxBytes)),
                ]
            ),
            ("last_error", s.lastError.map { .string($0) } ?? .null),
            ("version", .string(WSBridgeVersion.current)),
        ]
        if let close = s.lastClose {
            fields.append(("last_close", ["code": close.code.map { .number(JSONNumber($0)) } ?? .null, "reason": .string(close.reason), "by": .string(close.by)]))
        } else {
            fields.append(("last_close", .null))
        }
        if let retry = s.retryInMillis { fields.append(("retry_in_ms", .number(JSONNumber(retry)))) }
        return .object(fields)
    }
}

@available(*, unavailable)
extension LocalPlane: Sendable {}
