import Logging
import NIOCore
import NIOWebSocket
import WSBridgeCore
import WSBridgeProtocol

// MARK: - Attempts

/// One connection attempt: the connector (token and TLS prepared off the loop), the connect
/// timeout, the handshake, and what ends it.
extension UpstreamLink {
    func startAttempt(_ attempt: Int) {
        self.teardown()
        let connection = self.beginAttempt(attempt)
        if let at = self.connectAttempts.admit(now: self.now) {
            // upstream.limits.connect_attempts: the attempt starts when the window has room.
            self.connectWaits(until: at)
            let limit = self.connectAttempts.limit.map { "\($0)" } ?? "?"
            self.logger.notice(
                "upstream.limits.connect_attempts = \(limit): the window is full; attempt \(attempt) starts in \((at - self.now).short)",
                metadata: ["attempt": "\(attempt)"])
            connection.setDeadline(
                connection.schedule(at: NIODeadline.uptimeNanoseconds(at.nanoseconds)) {
                    guard self.isAt(.handshaking, connection) else { return }
                    self.startAttempt(attempt)
                })
            return
        }
        self.connectWaits(until: nil)
        let url = self.attemptURL()
        // The same settings (headers, token, TLS) for whichever URL this attempt uses.
        var attemptConfiguration = self.configuration
        attemptConfiguration.upstream.url = url
        self.emit(.attempt(number: attempt, url: url))
        // At debug: a failing attempt is logged once, as a warning saying what comes next.
        self.logger.debug("connecting (attempt \(attempt))", metadata: ["attempt": "\(attempt)"])
        if self.configuration.tls.insecure && url.isTLS {
            self.logger.warning("tls.insecure = true: the upstream's certificate is NOT verified; anyone on the path can read and change this link")
        }
        let timeout = self.configuration.upstream.connectTimeout
        connection.setDeadline(
            connection.schedule(in: .nanoseconds(timeout.nanoseconds)) {
                self.attemptFailed(
                    connection,
                    "timed out after \(timeout.short) waiting for TCP connect, TLS and the WebSocket upgrade (upstream.connect_timeout)"
                )
            })
        // The token and TLS files are read off the event loop; the TLS context is cached.
        self.connectors.prepare(configuration: attemptConfiguration, on: self.eventLoop)
            .assumeIsolated().whenComplete { result in
                switch result {
                case .success(let connector):
                    guard self.isAt(.handshaking, connection) else { return }
                    self.connect(connector, on: connection)
                case .failure(let error):
                    self.attemptFailed(connection, "\(error)")
                }
            }
    }

    /// Connects `connection`: the link's current one, or a renewal's second one. The same path
    /// for both; what its upgrade or failure means is decided by which it is when it comes.
    /// Nothing of its channel reaches the link once it ended.
    func connect(_ connector: any PreparedConnection, on connection: UpstreamConnection) {
        // Made here, on the loop, and handed to the channel's initializer (which runs on it too).
        let callbacks = NIOLoopBound(self.frameCallbacks(for: connection), eventLoop: self.eventLoop)
        let maxMessageSize = self.configuration.upstream.maxMessageSize
        let attemptFutures = connector.connect(on: self.eventLoop) { channel, deflate in
            UpstreamFrameHandler(callbacks: callbacks.value, maxMessageSize: maxMessageSize, deflate: deflate)
        }
        attemptFutures.channel.assumeIsolated().whenSuccess { channel in
            guard !connection.ended else {
                channel.close(promise: nil)
                return
            }
            connection.attach(channel)
            channel.closeFuture.assumeIsolated().whenComplete { _ in
                guard !connection.ended else { return }
                self.channelClosed(connection)
            }
        }
        // Read for this connection only, for `${token}` in the opening messages; never kept.
        let token = connector.token
        attemptFutures.handshake.assumeIsolated().whenComplete { result in
            let renewing = connection === self.renewal.successor
            switch result {
            case .success(let handshake):
                guard !connection.ended else {
                    handshake.channel.close(promise: nil)
                    return
                }
                if renewing {
                    self.successorUpgraded(handshake, successor: connection, token: token)
                } else {
                    self.handshakeSucceeded(handshake, connection: connection, token: token)
                }
            case .failure(let error):
                if renewing {
                    self.renewalFailed(connection, "\(error)")
                } else {
                    self.attemptFailed(connection, "\(error)")
                }
            }
        }
    }

    /// What `connection`'s frame handler tells the link: nothing once the connection ended.
    private func frameCallbacks(for connection: UpstreamConnection) -> UpstreamFrameHandler.Callbacks {
        UpstreamFrameHandler.Callbacks(
            message: { kind, data in
                guard !connection.ended else { return }
                self.receivedMessage(kind, data, on: connection)
            },
            control: { frame in
                guard !connection.ended else { return }
                self.received(frame, on: connection)
            },
            error: { error in
                guard !connection.ended else { return }
                self.channelError(error, on: connection)
            },
            writable: {
                guard !connection.ended else { return }
                self.becameWritable(on: connection)
            },
            readComplete: { self.readComplete() }
        )
    }

    /// Whether a callback of `connection` finds it the current one at `step`: else the attempt
    /// ended, or is past that step.
    private func isAt(_ step: Machine.AttemptStep, _ connection: UpstreamConnection) -> Bool {
        self.isCurrent(connection) && self.attemptStep == step
    }

    /// The upgrade is done: the opening messages go first; then, with a ready gate, the link
    /// waits (still `connecting`) for a message matching `upstream.ready_when`, else it opens.
    func handshakeSucceeded(_ handshake: UpstreamConnector.Handshake, connection: UpstreamConnection, token: String?) {
        guard self.isAt(.handshaking, connection) else {
            handshake.channel.close(promise: nil)
            return
        }
        self.connection.upgraded(
            handshake.channel, subprotocol: handshake.subprotocol, compression: handshake.deflate != nil, limits: self.configuration.upstream.limits,
            at: self.now)
        let reason = self.connectedReason
        // Only their count is logged: they may carry the token.
        let opening = self.session.opened(token: token)
        for message in opening { self.writeOwn(message) }
        if !opening.isEmpty {
            self.connection.channel?.flush()
            self.logger.debug("sent \(opening.count) opening message(s) (upstream.on_open)")
        }
        guard let gate = self.session.readyWhen else {
            self.opened(reason: reason) { m, now in try m.upgraded(readyGate: false, now: now) }
            return
        }
        self.input("upgraded", reason: reason) { m, now in try m.upgraded(readyGate: true, now: now) }
        let timeout = self.session.readyTimeout
        self.logger.info(
            "\(reason); waiting for an upstream message matching upstream.ready_when = \(ConfigurationError.tomlString(gate.text))",
            metadata: ["upstream.ready_when": "\(gate.text)"])
        connection.setDeadline(
            connection.schedule(in: .nanoseconds(timeout.nanoseconds)) {
                self.attemptFailed(connection, AttemptFailure(description: self.session.notReadyDetail(after: timeout), kind: .notReady))
            })
    }

    /// `connected`, with the subprotocol and permessage-deflate when negotiated.
    private var connectedReason: String {
        var details: [String] = []
        if let p = self.connection.subprotocol { details.append("subprotocol \(p)") }
        if self.connection.compression { details.append("permessage-deflate") }
        return details.isEmpty ? "connected" : "connected (\(details.joined(separator: ", ")))"
    }

    /// A message matched `upstream.ready_when`: the link opens.
    func becameReady(_ connection: UpstreamConnection) {
        guard self.isAt(.awaitingReady, connection) else { return }
        self.connection.setDeadline(nil)
        self.opened(reason: "\(self.connectedReason), ready (\(self.session.readyWhen?.text ?? "?"))") { m, now in
            try m.ready(now: now)
        }
    }

    /// The link is open for local clients (`transition` opens it): sticky sends, then the queue,
    /// then new sends.
    private func opened(reason: String, _ transition: (inout Machine, MonotonicInstant) throws -> Machine.Action) {
        // The machine tells whether the input opened the link (a ready gate keeps it connecting).
        guard self.input("connected", reason: reason, transition)?.to == .open else { return }
        if self.reconnects > 0 { self.metrics.reconnected(after: self.lostBecause) }
        self.scheduleFailback()
        self.armLifetime()
        let sticky = self.session.becameReady(slot: self.slot)
        for message in sticky { self.writeOwn(message) }
        if !sticky.isEmpty {
            self.connection.channel?.flush()
            self.logger.debug("sent \(sticky.count) sticky message(s)")
        }
        self.flushOutbound()
        // The machine started the connection's heartbeat as it opened: its timer starts.
        self.heartbeatTick()
    }

    func attemptFailed(_ connection: UpstreamConnection, _ description: String) {
        self.attemptFailed(connection, AttemptFailure(description: description))
    }

    func attemptFailed(_ connection: UpstreamConnection, _ failure: AttemptFailure) {
        guard self.isCurrent(connection), self.attemptStep != nil else { return }
        let description = failure.description
        self.teardown()
        self.failed(failure)
        self.metrics.attemptFailed(failure.kind)
        // With fallbacks, each failed attempt moves to the next URL (the backoff is the same).
        let urls = self.configuration.upstream.urls
        let failedURL = self.url
        var nextURL: UpstreamURL?
        self.supervise("connectFailed", reason: description) { supervisor, now in
            let (action, next) = try supervisor.connectFailed(.error(description), urls: urls, now: now)
            nextURL = next
            return action
        }
        // One line per failed attempt: what failed, and what happens next.
        let next: String
        switch self.phase {
        case .backingOff:
            let wait = self.retryAt.map { max(.zero, $0 - self.now) } ?? .zero
            next = "retrying in \(wait.short)"
        case .waitingForNetwork:
            next = "waiting for the network to come back"
        case .idle:
            next = "giving up after backoff.max_attempts = \(self.configuration.backoff.maxAttempts) attempts; `wsbridgectl connect` tries again"
        default:
            next = "now \(self.phase.rawValue)"
        }
        let target = urls.count > 1 ? " to \(failedURL)" : ""
        let then = nextURL.map { self.phase == .backingOff ? ", to \($0)" : "" } ?? ""
        self.logger.warning(
            "connect failed (attempt \(self.connection.number)\(target)): \(description); \(next)\(then)",
            metadata: ["attempt": "\(self.connection.number)", "reason": "\(failure.kind.rawValue)"]
        )
    }

    func channelClosed(_ connection: UpstreamConnection) {
        guard self.isCurrent(connection) else {
            self.overlapEnded(connection, "connection closed")
            return
        }
        let phase = self.phase
        if let step = self.attemptStep {
            let during = step == .awaitingReady ? "while waiting for upstream.ready_when" : "during the handshake"
            let closed = self.serverClose.map { c in
                "the server closed the connection \(during) (code \(c.code.map(String.init) ?? "none")\(c.reason.isEmpty ? "" : ": \(c.reason)"))"
            }
            self.attemptFailed(connection, self.connection.error ?? closed ?? "connection closed \(during)")
            return
        }
        guard phase == .open || phase == .closing else { return }
        if phase == .open,
            self.successorTakesOverEarly(self.serverClose.map { "the server closed it, code \($0.code.map(String.init) ?? "none")" } ?? "it ended")
        {
            return
        }
        let reason: DisconnectReason
        if let close = self.serverClose {
            reason = .serverClosed(code: close.code, reason: close.reason)
        } else if let error = self.connection.error {
            reason = .error(error)
        } else {
            reason = .error("connection ended without a close frame")
        }
        let lastSent = self.session.lastSent(slot: self.slot)
        self.teardown()
        // Who closed: the machine knows (a close we sent is the user's or the daemon's, whatever
        // the server answered), so the state line says what it recorded.
        let transition = self.input("disconnected", reason: self.lastDisconnect?.description ?? reason.description) { m, now in
            try m.disconnected(reason, now: now)
        }
        // Closed right after open (the machine's verdict): name what was sent last.
        if transition?.closedRightAfterOpen == true, case .serverClosed = reason, let lastSent {
            let culprit = "the server closed the link right after open (\(reason)), the last message sent being \(lastSent)"
            self.session.blame(culprit, slot: self.slot)
            self.logger.warning("\(culprit)", metadata: ["upstream.connection": "\(self.slot + 1)"])
        } else if self.failures == 0 {
            self.session.blame(nil, slot: self.slot)
        }
    }

    /// Open on a fallback with `upstream.failback_after` set: after that long, back to the primary
    /// (a reconnect; if the primary still fails, the next attempt moves on through the list).
    /// `planned`: the time is the one planned when the link opened (a renewal's connection took
    /// over), not counted again from now.
    func scheduleFailback(planned: Bool = false) {
        let connection = self.connection
        connection.setFailback(nil)
        guard let at = self.failback(planned: planned), let after = self.configuration.upstream.failbackAfter else { return }
        connection.setFailback(
            connection.schedule(at: NIODeadline.uptimeNanoseconds(at.nanoseconds)) {
                guard connection === self.connection else { return }
                let on = self.url
                guard self.backToPrimary() else { return }
                self.logger.notice("going back to the primary \(self.configuration.upstream.url) after \(after.short) on \(on) (upstream.failback_after)")
                self.reconnect()
            })
    }
}
