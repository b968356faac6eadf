import Logging
import NIOCore
import NIOWebSocket
import WSBridgeCore
import WSBridgeProtocol

// MARK: - Renewal

/// A connection renewed with no gap (`upstream.max_lifetime`, `upstream.renew_when`,
/// docs/limits.md): a second connection opens beside the current one (within
/// `connect_attempts`), its session is restored on it (opening messages, ready gate, sticky
/// sends, each paced on it), and once it delivers (a message of every stream the old one
/// delivered meanwhile, one of them the same as the old's) it takes over: the old one closes
/// once the requests sent on it are answered. Meanwhile both deliver, each message once
/// (`OverlapDedupe`); seq stays continuous. Apps' sends go on the current connection throughout.
/// With `upstream.protocol` its layer runs a session on each connection and dedupes what they
/// deliver as apps see it (`RenewalOverlapSink`, AppProtocolLayer+Overlap.swift).
/// A close the server did not announce still reconnects as before.
extension UpstreamLink {
    /// The current connection opened (or took over): its lifetime counts from its upgrade (a
    /// renewal's connection's from before its overlap).
    func armLifetime() {
        guard let lifetime = self.configuration.upstream.maxLifetime else {
            self.renewal.armLifetime(nil, ends: nil)
            return
        }
        let jitter = self.configuration.upstream.effectiveRenewJitter.nanoseconds
        let ends = RenewalMachine.lifetimeEnds(
            upgradedAt: self.connection.upgradedAt ?? self.now, lifetime: lifetime, jitterTaken: .nanoseconds(jitter > 0 ? Int64.random(in: 0...jitter) : 0))
        let connection = self.connection
        let timer = connection.schedule(at: NIODeadline.uptimeNanoseconds(ends.nanoseconds)) {
            guard connection === self.connection else { return }
            self.renew(why: "upstream.max_lifetime = \(lifetime.short)")
        }
        self.renewal.armLifetime(timer, ends: ends)
    }

    /// Whether an upstream message of the current connection is the server's notice that it
    /// will close (`upstream.renew_when`).
    func isRenewalNotice(_ message: UpstreamMessage, filter: Filter) -> Bool {
        guard message.kind == .text, self.renewal.successor == nil else { return false }
        let bytes = message.data.readableBytesView
        if filter.wholeText != nil { return filter.matches(json: nil, text: bytes) }
        guard let json = try? JSONValue.parse(bytes) else { return false }
        return filter.matches(json)
    }

    /// Renews the open connection (`why`: what asked for it), unless a renewal is under way.
    func renew(why: String) {
        switch self.askRenewal(why: why) {
        case .ignored:
            return
        case .afterOldEnds:
            self.logger.debug("renewal (\(why)) waits for the last renewal's old connection to end")
            return
        case .mayStart:
            break
        }
        if let at = self.connectAttempts.admit(now: self.now) {
            let connection = self.connection
            self.logger.notice("renewal (\(why)) waits \((at - self.now).short) for upstream.limits.connect_attempts")
            let timer = connection.schedule(at: NIODeadline.uptimeNanoseconds(at.nanoseconds)) {
                guard connection === self.connection else { return }
                self.renew(why: why)
            }
            self.renewal.armLifetime(timer, ends: at)
            return
        }
        guard self.startRenewal(why: why) else { return }
        let successor = UpstreamConnection(eventLoop: self.eventLoop, number: self.connection.number)
        let upstream = self.configuration.upstream
        // With a protocol, its layer runs a second session on the new connection and tells what
        // the two deliver as apps see it; else the wire's messages are compared.
        self.renewal.start(successor, dedupe: (upstream.dedupe, upstream.dedupeWindow))
        self.protocolOverlap?.overlapBegan(self, other: RenewalConnection(self))
        let url = self.url
        self.logger.notice("renewing the connection (\(why)): a second connection to \(url) opens; the current one stays until it delivers")
        let timeout = upstream.renewTimeout
        self.renewal.setDeadline(
            successor.schedule(in: .nanoseconds(timeout.nanoseconds)) {
                guard successor === self.renewal.successor else { return }
                let behind = self.renewal.overlap.dedupe?.behind() ?? []
                let detail =
                    self.renewalMachine.successorReady
                    ? (behind.isEmpty
                        ? "no message of it matched one of the old connection's" : "streams \(behind.joined(separator: ", ")) not delivered on it")
                    : "its session was not restored (connect, upgrade, upstream.ready_when)"
                self.renewalFailed(successor, "the new connection did not deliver within upstream.renew_timeout = \(timeout.short): \(detail)")
            })
        var attemptConfiguration = self.configuration
        attemptConfiguration.upstream.url = url
        self.connectors.prepare(configuration: attemptConfiguration, on: self.eventLoop).assumeIsolated().whenComplete { result in
            guard successor === self.renewal.successor else { return }
            switch result {
            case .success(let connector): self.connect(connector, on: successor)
            case .failure(let error): self.renewalFailed(successor, "\(error)")
            }
        }
    }

    /// The renewal's connection is given up: the current one stays; a lifetime's renewal is
    /// tried again after `upstream.renew_timeout`.
    func renewalFailed(_ connection: UpstreamConnection, _ why: String) {
        guard connection === self.renewal.successor else { return }
        let upstream = self.configuration.upstream
        let again = self.renewalFailed(why, lifetimeSet: upstream.maxLifetime != nil, retry: upstream.renewTimeout)
        self.renewal.failed()
        self.protocolOverlap?.overlapEnded(self, why)
        self.logger.warning("renewal failed: \(why); the current connection stays")
        guard let retry = again else { return }
        let current = self.connection
        let ends = self.now + retry
        let timer = current.schedule(in: .nanoseconds(retry.nanoseconds)) {
            guard current === self.connection else { return }
            self.renew(why: "a renewal again after the last failed")
        }
        self.renewal.armLifetime(timer, ends: ends)
    }

    /// The renewal's connection upgraded: its opening messages, then its ready gate or its
    /// sticky sends.
    func successorUpgraded(_ handshake: UpstreamConnector.Handshake, successor: UpstreamConnection, token: String?) {
        guard successor === self.renewal.successor else {
            handshake.channel.close(promise: nil)
            return
        }
        successor.upgraded(
            handshake.channel, subprotocol: handshake.subprotocol, compression: handshake.deflate != nil, limits: self.configuration.upstream.limits,
            at: self.now)
        // Its heartbeat starts, as any connection's at its upgrade.
        self.otherUpgraded()
        self.heartbeatTick(on: successor)
        for message in self.session.opened(token: token) { self.writeOwn(message, on: successor) }
        if self.session.readyWhen == nil { self.successorReady(successor) }
    }

    /// The renewal's connection is ready: the sticky sends go on it, and its messages count.
    func successorReady(_ successor: UpstreamConnection) {
        let sticky = self.session.entries(slot: self.slot)
        for entry in sticky { self.writeOwn(OutboundMessage(entry.payload), on: successor) }
        self.renewalReady(sent: Set(sticky.map(\.key)))
        self.protocolOverlap?.overlapReady(self)
        self.logger.info("renewal: the new connection is ready (\(sticky.count) sticky message(s) sent on it); waiting for it to deliver")
    }

    /// A message of the renewal's connection (before it took over) or of the old one (after).
    func overlapMessage(_ kind: UpstreamMessage.Kind, _ data: ByteBuffer, on connection: UpstreamConnection) {
        guard let isSuccessor = self.renewal.isSuccessor(connection) else { return }
        let read = connection.readTime()
        if read.first { self.otherReceivedMessage() }
        let message = UpstreamMessage(kind: kind, data: data, receivedAtMillis: read.millis)
        self.counted(received: data.readableBytes)
        // Before its session is restored the new connection's messages are its session's own (a
        // login's answers): the ready gate reads them; apps do not. With a protocol, the layer
        // runs that connection's session on them either way (what it sends goes on it).
        let ready = !isSuccessor || self.renewalMachine.successorReady
        let layer = self.protocolOverlap
        if let layer {
            self.overlapRead(layer, message, side: .other, handshake: !ready)
        } else if ready, let delivered = self.renewal.admit(message, fromCurrent: false) {
            self.emit(.message(delivered))
        }
        if !ready {
            if self.session.observe(message, awaitingReady: true) { self.successorReady(connection) }
        } else if isSuccessor {
            if self.renewal.caughtUp(restoring: layer?.overlapRestoring ?? false) { self.successorTookOver() }
        } else {
            self.closeRetiringWhenAnswered()
        }
    }

    /// The current connection ended (`why`) while a renewal's was restored: it takes over at
    /// once, instead of a reconnect. True when it did.
    func successorTakesOverEarly(_ why: String) -> Bool {
        guard let successor = self.renewal.successor, self.renewalMachine.successorReady, self.phase == .open else { return false }
        let old = self.connection
        self.logger.notice("the connection ended (\(why)) while its renewal was under way: the new connection takes over now")
        self.successorTookOver()
        guard self.connection === successor else { return false }
        self.overlapEnded(old, why)
        return true
    }

    /// The renewal's connection delivered: it becomes the current one; the old one closes.
    private func successorTookOver() {
        guard let successor = self.renewal.successor else { return }
        let sentKeys = self.renewalMachine.sentKeys
        let registered = self.session.entries(slot: self.slot).filter { !sentKeys.contains($0.key) }
        guard let (old, took) = self.takeOver(successor) else { return }
        let held = self.renewal.tookOver(old: old)
        // What it brought ahead of the old one, in its order, before anything else of it (the
        // protocol layer's sessions swapped first: the new one is the current one).
        let layer = self.protocolOverlap
        layer?.overlapTookOver(self)
        for item in held {
            switch item {
            case .wire(let message): self.emit(.message(message))
            case .delivery(let delivery): layer?.overlapDeliver(self, delivery)
            }
        }
        // The old one's heartbeat is over (it closes); the new one's goes on, and its protocol
        // keepalive starts.
        old.heartbeat.stop()
        old.keepalive.stop()
        self.keepaliveTick()
        // Keys registered while it was restored went on the old connection only.
        for entry in registered { self.writeOwn(OutboundMessage(entry.payload)) }
        self.logger.notice(
            "renewed (\(self.renewalMachine.why)): the new connection delivered after \(took.short); the old one closes",
            metadata: ["renewals": "\(self.renewalMachine.count)"])
        self.heartbeatTick()
        self.flushOutbound()
        self.armLifetime()
        // On a fallback, the new connection goes back to the primary when the old one would have.
        self.scheduleFailback(planned: true)
        self.closeRetiringWhenAnswered()
    }

    /// The old connection closes (1000) once no request waits for its answer, or at
    /// `upstream.renew_timeout` after it was replaced whatever waits; then its TCP end is
    /// awaited (as any close handshake), and the overlap's dedupe stays a moment more for the
    /// new connection's messages the old one delivered first.
    func closeRetiringWhenAnswered() {
        guard let old = self.renewal.retiring else { return }
        switch self.renewalCloseOld(requestsInFlight: self.events.upstreamLinkRequestsInFlight(self)) {
        case .ignored:
            return
        case .now:
            self.closeRetiring(old)
        case .whenAnswered:
            if !self.renewal.hasDeadline {
                let timeout = self.configuration.upstream.renewTimeout
                self.renewal.setDeadline(
                    old.schedule(in: .nanoseconds(timeout.nanoseconds)) {
                        guard old === self.renewal.retiring else { return }
                        self.closeRetiring(old)
                    })
            }
        }
    }

    private func closeRetiring(_ old: UpstreamConnection) {
        guard old.channel != nil, let action = self.renewalClosingOld() else { return }
        // That connection's close handshake (the supervisor's): ours goes once.
        guard case .sendClose(let code, let reason) = action else { return }
        old.writeClose(code: code, reason: reason, timeout: Self.closeTimeout) {
            self.logger.info("the server did not end the renewed connection after the close handshake; closing it")
        }
    }

    /// A control frame on the renewal's connection or the old one, as on the current one: alive
    /// for its heartbeat, pings answered, pongs taken, the server's close echoed (then the
    /// server ends TCP, and the renewal hears of it).
    func overlapFrame(_ frame: WebSocketFrame, on connection: UpstreamConnection) {
        guard self.renewal.isSuccessor(connection) != nil, let channel = connection.channel else { return }
        switch frame.opcode {
        case .ping:
            self.otherReceived()
            self.answerPing(frame, on: connection)
        case .pong:
            var data = frame.unmaskedData
            _ = self.otherPong(payload: data.readableBytes == 8 ? data.readInteger(as: UInt64.self) : nil)
        case .connectionClose:
            self.otherReceived()
            var data = frame.unmaskedData
            let code = data.readWebSocketErrorCode().map { UInt16(webSocketErrorCode: $0) }
            let reason = data.readString(length: data.readableBytes) ?? ""
            switch self.otherCloseFrameReceived(code: code, reason: reason) {
            case .sendClose(let code, let reason):
                connection.writeClose(code: code, reason: reason, timeout: Self.closeTimeout) {
                    self.logger.info("the server did not end the renewal's other connection after its close handshake; closing it")
                }
            default:
                // Ours went first: the server ends TCP now (or our close's timeout does).
                if !connection.awaitingEnd { channel.close(promise: nil) }
            }
        default:
            break
        }
    }

    /// The renewal's connection or the old one ended (or failed).
    func overlapEnded(_ connection: UpstreamConnection, _ why: String) {
        guard let isSuccessor = self.renewal.isSuccessor(connection) else { return }
        if isSuccessor {
            self.renewalFailed(connection, "the new connection ended before it delivered: \(why)")
            return
        }
        // The new connection may still bring what the old one delivered first: the overlap's
        // dedupe stays a moment, through a renewal that begins meanwhile too.
        self.renewal.retired(tailEnds: self.eventLoop.assumeIsolated().scheduleTask(in: Self.closeTimeout) { self.renewal.endTail() })
        let waiting = self.renewalOldEnded()
        self.protocolOverlap?.overlapEnded(self, why)
        // A renewal asked for while it closed (a short lifetime, a notice): now.
        if let waiting { self.renew(why: waiting) }
    }

    /// The protocol's layer, when it runs a renewal's overlap (nil: raw, the wire's messages are
    /// compared).
    var protocolOverlap: (any RenewalOverlapSink)? { self.events.renewalOverlap }

    /// What `message` delivers through the layer's session of `side`, each delivery once (the
    /// overlap admits it).
    func overlapRead(_ layer: any RenewalOverlapSink, _ message: UpstreamMessage, side: OverlapSide, handshake: Bool) {
        for (delivery, key) in layer.overlapRead(self, message, side: side, handshake: handshake) {
            if let admitted = self.renewal.admit(delivery, key: key, fromCurrent: side == .current) { layer.overlapDeliver(self, admitted) }
        }
    }

    /// `status`'s `renewal`, when renewal is set.
    var renewalStatus: StatusReport.Renewal? {
        let upstream = self.configuration.upstream
        let machine = self.renewalMachine
        guard upstream.maxLifetime != nil || upstream.renewWhen != nil || machine.count + machine.failed > 0 else { return nil }
        return StatusReport.Renewal(
            underway: machine.underway, inMs: self.renewal.lifetimeEnds.map { max(0, ($0 - self.now).nanoseconds / 1_000_000) },
            renewals: machine.count, failed: machine.failed,
            duplicatesDropped: self.renewal.duplicatesDropped,
            last: machine.last.map { .init(at: $0.atMillis, overlapMs: $0.overlapMs, why: $0.why, failure: $0.failure) })
    }
}
