import Logging
import NIOCore
import NIOWebSocket
import WSBridgeCore
import WSBridgeProtocol

/// The WebSocket face's part of the plane (`[local.websocket]`, docs/websocket.md): its apps are
/// the plane's clients of a second kind, numbered with the NDJSON ones, reading the same fan-out
/// (as frames) and sending through the same link under the same access rules. The listener
/// (`WebSocketListener`) hands the plane each connection it accepts and each it upgrades.
struct WebSocketApps {
    let limits: Configuration.Local.WebSocket
    /// The face's token (`local.websocket.token_file`); nil: none needed.
    let token: String?
    /// With `upstream.protocol`: what its apps' libraries expect of the face (nil: raw).
    let face: AppProtocolFace?
    private(set) var apps: [Int: WebSocketApp] = [:]
    /// Connections between their accept and their end (upgraded or not): what
    /// `local.websocket.max_clients` bounds.
    fileprivate(set) var connections = 0

    init(limits: Configuration.Local.WebSocket, token: String?, face: AppProtocolFace?) {
        self.limits = limits
        self.token = token
        self.face = face
    }

    fileprivate mutating func insert(_ app: WebSocketApp) { self.apps[app.id] = app }
    fileprivate mutating func remove(_ app: WebSocketApp) -> Bool { self.apps.removeValue(forKey: app.id) != nil }
}

extension LocalPlane {
    /// A connection was accepted on the face; false when it is full (it is answered 503).
    func webSocketAdmit() -> Bool {
        guard self.webSocket.connections < self.webSocket.limits.maxClients else { return false }
        self.webSocket.connections += 1
        return true
    }

    /// An accepted connection ended.
    func webSocketLeft() { self.webSocket.connections -= 1 }

    /// An app for an upgraded connection: it may send if its user may, or it showed the token.
    func makeWebSocketApp(_ peer: WebSocketPeer, output: FrameOutput, start: WebSocketStart?) -> WebSocketApp {
        let mayWrite = peer.hasToken || self.mayWrite(peer.credentials, groups: peer.groups)
        return WebSocketApp(
            id: self.takeClientID(), peer: peer, mayWrite: mayWrite, plane: self, output: output, face: self.webSocket.face, start: start,
            limits: self.configuration.local)
    }

    /// Where a raw app's frames start, from its request's query: after its `since` in `stream`
    /// (a resume: `?stream=ID&since=SEQ`), else after the stream's last message now. Why not,
    /// when the ring no longer holds what a resume asks for. nil with a protocol (an app's
    /// messages there are its own, never replayed).
    func webSocketStart(query: String) -> Result<WebSocketStart?, Refusal> {
        let fields = AppProtocolFace.fields(query)
        let (seq, stream) = self.fanout.position
        guard let sinceText = fields["since"] else {
            return .success(self.webSocket.face == nil ? WebSocketStart(stream: stream, seq: seq, resumes: false) : nil)
        }
        guard self.webSocket.face == nil else {
            return .failure(.request("?since= resumes a raw app's feed: with upstream.protocol an app's messages are its own, never replayed"))
        }
        guard let since = UInt64(sinceText) else { return .failure(.request("?since= takes a seq (a whole number), not \(sinceText)")) }
        guard let asked = fields["stream"], asked == stream else {
            return .failure(
                .gone(
                    "the stream is \(stream) now (wsbridged restarted, or ?stream= was not given): its seqs are not the ones you counted; connect without ?since= (the Wsbridge-Stream and Wsbridge-Seq headers say where the new one stands)"
                ))
        }
        guard since <= seq else { return .failure(.gone("seq \(since) is past the stream's last (\(seq)): connect without ?since=")) }
        guard since == seq || (self.fanout.ring.oldestSeq ?? .max) <= since + 1 else {
            let oldest = self.fanout.ring.oldestSeq.map { "from seq \($0)" } ?? "nothing"
            return .failure(
                .gone(
                    "seq \(since + 1) on is no longer held: the replay ring (local.replay, local.replay_bytes) holds \(oldest); connect without ?since= to start from now"
                ))
        }
        return .success(WebSocketStart(stream: stream, seq: since, resumes: true))
    }

    func webSocketAdded(_ app: WebSocketApp) {
        self.webSocket.insert(app)
        self.fanout.flush()
        if let start = app.start, start.seq < self.fanout.position.seq {
            // What came after where it starts (a resume's backlog, or what came during its
            // upgrade), from the replay ring, before anything live.
            if let (frames, count) = self.fanout.framesFromRing(after: start.seq) {
                app.deliver(frames, messages: count)
            } else if start.resumes {
                app.fail(WebSocketApp.tryAgainLater, "the replay ring moved past seq \(start.seq + 1) while the app connected: connect again")
            }
        }
        self.fanout.frames.add(app)
        let uid = app.peer.credentials.map { "uid \($0.uid)" } ?? "unknown user"
        self.logger.info(
            "WebSocket app \(app.id) connected (\(app.peer.address), \(uid), \(app.peer.uri)\(app.mayWrite ? ", may send" : ", read-only"))",
            metadata: ["client.id": "\(app.id)"])
    }

    func webSocketRemoved(_ app: WebSocketApp) {
        guard self.webSocket.remove(app) else { return }
        // What was published for the apps so far goes out (and into the ring) while it is one:
        // with no app left, no frame would carry the rest of the flush into the ring.
        self.fanout.flush()
        self.fanout.frames.remove(app)
        // What it held (its subscriptions, its calls waiting) is let go, as an NDJSON app's.
        if self.appProtocol != nil { self.protocolAppLeft(app.id) }
        self.logger.info("WebSocket app \(app.id) left", metadata: ["client.id": "\(app.id)"])
    }

    /// `message` upstream, as an NDJSON `send` goes (queued while the link is down, spooled when
    /// the spool is on); the refusal's text when it cannot go.
    func webSocketSend(_ message: OutboundMessage, from app: WebSocketApp) -> String? {
        self.refusal(of: self.link.send(message), for: app)
    }

    /// What a send of `app`'s came to: the refusal's text when it cannot go; a spooled one that
    /// the spool refuses later closes the app then (1013).
    private func refusal(of outcome: SendOutcome, for app: WebSocketApp) -> String? {
        switch outcome {
        case .sent, .queued: return nil
        case .spooling(let stored):
            stored.assumeIsolated().whenSuccess { outcome in
                if case .rejected(let reason) = outcome { app.fail(WebSocketApp.tryAgainLater, reason) }
            }
            return nil
        case .rejected(let reason): return reason
        }
    }

    /// A message from an app with `upstream.protocol`: each of the protocol's messages in it
    /// answered by the face (`AppProtocolFace`: what names the app's own session) or taken
    /// through the protocol layer, as an NDJSON app's `send` is. Returns why the app must be
    /// closed, if it must.
    func webSocketProtocolMessage(_ message: OutboundMessage, from app: WebSocketApp, face: AppProtocolFace) -> (WebSocketErrorCode, String)? {
        guard let layer = self.appProtocol else { return nil }
        let name = layer.session.name
        // A binary frame is taken as the protocol's text too, as its servers take it (web3.py
        // sends JSON-RPC in binary frames); it must be UTF-8.
        if message.kind == .binary {
            var utf8 = UTF8Validator()
            guard utf8.feed(message.data.readableBytesView), utf8.isComplete else {
                return (.dataInconsistentWithMessage, "upstream.protocol is \(name): a binary message that is not UTF-8 text of it")
            }
        }
        let views: [JSONValue]
        switch layer.session.codec.parse(app: String(decoding: message.data.readableBytesView, as: UTF8.self)) {
        case .failure(let error): return (.policyViolation, "not a message of \(name): \(error)")
        case .success(let parsed): views = parsed
        }
        for view in views {
            switch face.handling(of: view, sid: app.sid) {
            case .answer(let text):
                _ = self.fanout.deliverToWebSocketApp(app.id, data: ByteBuffer(string: text))
            case .pong:
                app.ponged()
            case .swallow:
                break
            case .layer:
                if !app.mayWrite, !layer.session.codec.classify(fromApp: view).isAnsweredHere {
                    return (.policyViolation, app.mayNotSend)
                }
                let performed = self.throughProtocol(app.id, [view])
                if let refusal = performed.refusal { return (.policyViolation, "\(name): \(refusal)") }
                if let sent = performed.sent, let reason = self.refusal(of: sent, for: app) { return (WebSocketApp.tryAgainLater, reason) }
            }
        }
        return nil
    }

    /// Closes every app of the face (the daemon stops): 1001, going away.
    func closeWebSocketApps() {
        for app in self.webSocket.apps.values { app.close(.goingAway, reason: "wsbridged is stopping") }
    }
}

extension LocalPlane {
    /// `status`'s `websocket`.
    var webSocketReport: StatusReport.WebSocketFace {
        let limits = self.webSocket.limits
        let apps = self.webSocket.apps.count
        return .init(listen: limits.listen.map { "\($0)" }, socket: limits.socket, apps: apps, connections: self.webSocket.connections - apps)
    }

    /// The face's apps, as `clients` lists them.
    var webSocketClients: [ClientsResult.Client] {
        self.webSocket.apps.values.map { app in
            let queued = app.queued
            var client = ClientsResult.Client(
                id: app.id, pid: app.peer.credentials.flatMap { $0.pid > 0 ? $0.pid : nil }, uid: app.peer.credentials?.uid, subscribed: true,
                filter: nil, messages: app.messages, queued: queued.messages, queueBytes: queued.bytes, drops: 0)
            client.face = "websocket"
            client.address = app.peer.address
            client.path = app.peer.uri
            client.userAgent = app.peer.userAgent
            return client
        }
    }
}
