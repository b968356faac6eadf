import Logging
import NIOCore
import NIOWebSocket
import WSBridgeCore
import WSBridgeProtocol

/// Drives the upstream WebSocket: owns the connection and heartbeat state machines, performs
/// their actions (connect, timers, close frames), and turns channel events back into inputs.
/// This file holds the driver, every stored property of it private (the state machine, the
/// retry timer, why the last link ended, its parts), and what it does, by concern: attempts,
/// frames and the close handshake, the heartbeat (with `LinkHeartbeat`), sends and the status
/// snapshot. The rest of its state lives in parts that keep it in their own file and change it
/// only through their methods: the current connection (`LinkAttempt`), the URL list
/// (`Failover`), the queue and spool (`OutboundPath`) and what it carried (`StatusReport.Traffic`).
///
/// Confined to one event loop: every method runs there. Other threads use `UpstreamLinkHandle`.
/// Each attempt gets a generation number; callbacks from an older attempt are ignored, so a
/// late handshake or close can never confuse the state machine. Its state is read by the local
/// plane through `LinkControl`, and its events go to one `UpstreamEventSink`.
package final class UpstreamLink: LinkControl {
    package typealias Machine = ConnectionStateMachine<SystemRandomNumberGenerator>

    private let eventLoop: any EventLoop
    private var configuration: Configuration
    private let logger: Logger
    private let events: any UpstreamEventSink
    /// Reads the token and builds the TLS context off the loop (cached).
    private let connectors: ConnectorFactory
    private let metrics: DaemonMetrics
    /// What is restored on every open: opening messages, the ready gate, sticky sends.
    private let session: UpstreamSession

    // The parts, each with its state private to its own file.
    /// The current connection: generation, channel, close flags, timers (LinkAttempt.swift).
    private let attempt = LinkAttempt()
    /// Which URL the next attempt uses, and the return to the primary (Failover.swift).
    private let failover = Failover()
    /// The queue, the spool and the sends on their way (UpstreamLink+Sending.swift).
    private let outbound: OutboundPath
    /// Pings, the round trip and the pong deadline (LinkHeartbeat.swift).
    private let heartbeat: LinkHeartbeat
    /// What the link carried, kept as `status` reports it.
    private var traffic = StatusReport.Traffic()

    // The driver's own state: only this file changes it.
    private var machine: Machine
    private var retryTimer: Scheduled<Void>?
    private let stopped: EventLoopPromise<Void>
    private var phaseSinceWall = WallClock.millisecondsSinceEpoch()
    /// Why the last open link ended (not a later failed attempt): the reconnect's metric label.
    private var lostBecause: DisconnectReason?
    /// A flush of the sends written in this event-loop tick is due (`flushSoon`).
    private var flushScheduled = false
    /// How long to wait for the server to end the TCP connection after a close handshake.
    static let closeTimeout: TimeAmount = .seconds(3)

    init(
        configuration: Configuration,
        networkAvailable: Bool,
        eventLoop: any EventLoop,
        logger: Logger,
        connectors: ConnectorFactory,
        events: any UpstreamEventSink,
        metrics: DaemonMetrics = DaemonMetrics(),
        spool: (Spool, Spool.Restored)? = nil,
        session: UpstreamSession? = nil
    ) {
        self.metrics = metrics
        self.session = session ?? UpstreamSession(configuration: configuration, eventLoop: eventLoop, logger: logger)
        self.eventLoop = eventLoop
        self.configuration = configuration
        var logger = logger
        logger[metadataKey: "upstream.url"] = "\(configuration.upstream.url)"
        self.logger = logger
        self.events = events
        self.connectors = connectors
        self.stopped = eventLoop.makePromise()
        self.heartbeat = LinkHeartbeat(eventLoop: eventLoop)
        self.outbound = OutboundPath(configuration: configuration, spool: spool, eventLoop: eventLoop, metrics: metrics, logger: logger)
        self.machine = Machine(
            settings: .init(backoff: configuration.backoff.policy, maxAttempts: configuration.backoff.maxAttempts),
            networkAvailable: networkAvailable,
            now: Self.now(),
            generator: SystemRandomNumberGenerator()
        )
        if let spool = spool?.0 {
            // Told once per batch; the link lives as long as the daemon's loop.
            let bound = NIOLoopBound(self, eventLoop: eventLoop)
            spool.whenStored { stored in bound.value.spoolStored(stored) }
        }
    }

    static func now() -> MonotonicInstant {
        MonotonicInstant(nanoseconds: NIODeadline.now().uptimeNanoseconds)
    }

    // MARK: - Inputs

    var phase: ConnectionPhase { self.machine.phase }
    var roundTripTime: Duration? { self.heartbeat.roundTripTime }
    var url: UpstreamURL { self.failover.attemptURL ?? self.configuration.upstream.url }

    func emit(_ event: UpstreamEvent) {
        self.events.upstreamLink(self, emitted: event)
    }

    /// The socket read that brought the last messages is done.
    func emitReadComplete() {
        self.events.upstreamLinkReadComplete(self)
    }
    var stoppedFuture: EventLoopFuture<Void> { self.stopped.futureResult }
    /// The current connection's generation: a watch on a send made on it ends with it.
    var connectionGeneration: Int { self.attempt.generation }

    func connect() {
        self.input("connect", reason: "connect requested") { m, now in try m.connectRequested(now: now) }
    }

    func reconnect() {
        self.input("reconnect", reason: "reconnect requested") { m, now in try m.reconnectRequested(now: now) }
    }

    func close(code: UInt16, reason: String) {
        self.input("close", reason: "close requested (code \(code))") { m, now in m.userClose(code: code, reason: reason, now: now) }
    }

    func fail(_ description: String) {
        if self.phase == .connecting {
            self.attemptFailed(generation: self.attempt.generation, description)
            return
        }
        guard self.phase == .open, self.attempt.channel != nil else { return }
        self.drop(because: .error(description), input: "protocolFailure")
    }

    /// The open link is dead (the heartbeat's deadline passed, the protocol's keepalive went
    /// unanswered): no close handshake is possible; TCP is dropped and the machine told.
    private func drop(because reason: DisconnectReason, input: String) {
        self.attempt.failed(AttemptFailure(description: reason.description))
        self.logger.warning("upstream dead: \(reason)")
        self.teardown()
        self.input(input, reason: reason.description) { m, now in try m.disconnected(reason, now: now) }
    }

    func shutdown() -> EventLoopFuture<Void> {
        self.input("shutdown", reason: "daemon stopping") { m, now in m.shutdown(now: now) }
        return self.stopped.futureResult
    }

    func networkChanged(available: Bool) {
        guard available != self.machine.networkAvailable else { return }
        self.logger.info(available ? "network: route to upstream available" : "network: no route to upstream")
        let reason = available ? "network available" : "network lost: no route to the upstream host"
        self.input("network", reason: reason) { m, now in m.networkChanged(available: available, now: now) }
    }

    /// Applies a reloaded configuration to what can change on a live link.
    func update(configuration: Configuration) {
        self.configuration = configuration
        self.failover.update(urls: configuration.upstream.urls)
        // A changed upstream.failback_after applies to the link open now.
        if self.machine.phase == .open { self.scheduleFailback() }
        self.outbound.update(configuration: configuration)
        self.session.update(configuration: configuration)
        self.machine.updateSettings(.init(backoff: configuration.backoff.policy, maxAttempts: configuration.backoff.maxAttempts))
        self.updateHeartbeat()
    }

    // MARK: - Driving the machine

    /// `reason` is read after the machine took the input (it may describe what the machine recorded).
    func input(_ name: String, reason: @autoclosure () -> String, _ body: (inout Machine, MonotonicInstant) throws -> Machine.Action) {
        let action: Machine.Action
        do {
            action = try body(&self.machine, Self.now())
        } catch {
            self.logger.error("bug: the state machine refused \(name) in \(self.machine.phase.rawValue)", metadata: ["error": "\(error)", "input": "\(name)"])
            return
        }
        self.perform(action)
        guard let transition = self.machine.takeTransition() else { return }
        let (before, after) = (transition.from, transition.to)
        if let lost = transition.lost { self.lostBecause = lost }
        self.phaseSinceWall = WallClock.millisecondsSinceEpoch()
        var metadata: Logger.Metadata = ["state.from": "\(before.rawValue)", "state.to": "\(after.rawValue)", "reason": "\(reason())"]
        if after == .open, let p = self.attempt.subprotocol { metadata["upstream.subprotocol"] = "\(p)" }
        // Retry cycles (connecting <-> backingOff) at debug: each failure is one warning already.
        let cycling = (before == .connecting && after == .backingOff) || (before == .backingOff && after == .connecting)
        self.logger.log(level: cycling ? .debug : .notice, "state \(before.rawValue) -> \(after.rawValue): \(reason())", metadata: metadata)
        self.emit(.state(after, reason: reason()))
        if after == .stopped { self.stopped.succeed(()) }
    }

    func perform(_ action: Machine.Action) {
        switch action {
        case .none:
            break
        case .connect(let attempt):
            // Out of a backoff early (asked to connect, the network back): its timer goes.
            self.retryTimer?.cancel()
            self.retryTimer = nil
            self.startAttempt(attempt)
        case .scheduleRetry(let delay, let attempt):
            let generation = self.attempt.generation
            self.logger.debug(
                "retrying in \(delay.short) (attempt \(attempt))",
                metadata: ["backoff.delay_ms": "\(delay.nanoseconds / 1_000_000)", "backoff.attempt": "\(attempt)"]
            )
            self.emit(.retryScheduled(attempt: attempt, delay: delay))
            self.retryTimer?.cancel()
            self.retryTimer = self.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(delay.nanoseconds)) {
                guard self.attempt.isCurrent(generation) else { return }
                self.retryTimer = nil
                self.input("retry", reason: "backoff elapsed") { m, now in try m.retryTimerFired(now: now) }
            }
        case .cancelRetry:
            self.retryTimer?.cancel()
            self.retryTimer = nil
        case .sendClose(let code, let reason):
            self.sendClose(code: code, reason: reason)
        case .abort(let reason):
            self.logger.info("dropping connection: \(reason)")
            self.teardown()
        case .abortAndConnect(let attempt):
            self.teardown()
            self.startAttempt(attempt)
        }
    }

    /// Forgets the current attempt or link: later callbacks from it are ignored.
    func teardown() {
        self.attempt.end()
        self.heartbeat.stop()
        self.session.ended()
    }
}

// MARK: - Attempts

/// One connection attempt: the connector (token and TLS prepared off the loop), the connect
/// timeout, the handshake, and what ends it.
extension UpstreamLink {
    func startAttempt(_ attempt: Int) {
        self.teardown()
        let generation = self.attempt.begin(number: attempt)
        let url = self.failover.urlForAttempt(in: self.configuration.upstream.urls)
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
        self.attempt.setDeadline(
            self.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(timeout.nanoseconds)) {
                self.attemptFailed(
                    generation: generation,
                    "timed out after \(timeout.short) waiting for TCP connect, TLS and the WebSocket upgrade (upstream.connect_timeout)"
                )
            })
        // The token and TLS files are read off the event loop; the TLS context is cached.
        self.connectors.prepare(configuration: attemptConfiguration, on: self.eventLoop)
            .assumeIsolated().whenComplete { result in
                switch result {
                case .success(let connector):
                    guard self.isAt(.handshaking, generation) else { return }
                    self.connect(connector, generation: generation)
                case .failure(let error):
                    self.attemptFailed(generation: generation, "\(error)")
                }
            }
    }

    private func connect(_ connector: UpstreamConnector, generation: Int) {
        let bound = NIOLoopBound(self, eventLoop: self.eventLoop)
        let maxMessageSize = self.configuration.upstream.maxMessageSize
        let attemptFutures = connector.connect(on: self.eventLoop) { channel, deflate in
            UpstreamFrameHandler(
                callbacks: .init(
                    message: { kind, data in bound.value.receivedMessage(kind, data, generation: generation) },
                    control: { frame in bound.value.received(frame, generation: generation) },
                    error: { error in bound.value.channelError(error, generation: generation) },
                    writable: { bound.value.becameWritable(generation: generation) },
                    readComplete: { bound.value.readComplete() }
                ),
                maxMessageSize: maxMessageSize,
                deflate: deflate
            )
        }
        attemptFutures.channel.assumeIsolated().whenSuccess { channel in
            guard self.attempt.isCurrent(generation) else {
                channel.close(promise: nil)
                return
            }
            self.attempt.attach(channel)
            channel.closeFuture.assumeIsolated().whenComplete { _ in
                self.channelClosed(generation: generation)
            }
        }
        // Read for this connection only, for `${token}` in the opening messages; never kept.
        let token = connector.token
        attemptFutures.handshake.assumeIsolated().whenComplete { result in
            switch result {
            case .success(let handshake):
                self.handshakeSucceeded(handshake, generation: generation, token: token)
            case .failure(let error):
                self.attemptFailed(generation: generation, "\(error)")
            }
        }
    }

    /// Whether a callback of attempt `generation` finds it at `step`: else the attempt was
    /// forgotten, or is past that step.
    private func isAt(_ step: Machine.AttemptStep, _ generation: Int) -> Bool {
        self.attempt.isCurrent(generation) && self.machine.attemptStep == step
    }

    /// The upgrade is done: the opening messages go first; then, with a ready gate, the link
    /// waits (still `connecting`) for a message matching `upstream.ready_when`, else it opens.
    func handshakeSucceeded(_ handshake: UpstreamConnector.Handshake, generation: Int, token: String?) {
        guard self.isAt(.handshaking, generation) else {
            handshake.channel.close(promise: nil)
            return
        }
        self.attempt.upgraded(handshake.channel, subprotocol: handshake.subprotocol, compression: handshake.deflate != nil)
        let reason = self.connectedReason
        // Only their count is logged: they may carry the token.
        let opening = self.session.opened(token: token)
        for message in opening { self.writeFrame(message, flush: false) }
        if !opening.isEmpty {
            self.attempt.channel?.flush()
            self.logger.debug("sent \(opening.count) opening message(s) (upstream.on_open)")
        }
        guard let gate = self.session.readyWhen else {
            self.opened(generation: generation, reason: reason) { m, now in try m.upgraded(readyGate: false, now: now) }
            return
        }
        self.input("upgraded", reason: reason) { m, now in try m.upgraded(readyGate: true, now: now) }
        let timeout = self.session.readyTimeout
        self.logger.info(
            "\(reason); waiting for an upstream message matching upstream.ready_when = \(ConfigurationError.tomlString(gate.text))",
            metadata: ["upstream.ready_when": "\(gate.text)"])
        self.attempt.setDeadline(
            self.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(timeout.nanoseconds)) {
                self.attemptFailed(generation: generation, AttemptFailure(description: self.session.notReadyDetail(after: timeout), kind: .notReady))
            })
    }

    /// `connected`, with the subprotocol and permessage-deflate when negotiated.
    private var connectedReason: String {
        var details: [String] = []
        if let p = self.attempt.subprotocol { details.append("subprotocol \(p)") }
        if self.attempt.compression { details.append("permessage-deflate") }
        return details.isEmpty ? "connected" : "connected (\(details.joined(separator: ", ")))"
    }

    /// A message matched `upstream.ready_when`: the link opens.
    func becameReady(generation: Int) {
        guard self.isAt(.awaitingReady, generation) else { return }
        self.attempt.setDeadline(nil)
        self.opened(generation: generation, reason: "\(self.connectedReason), ready (\(self.session.readyWhen?.text ?? "?"))") { m, now in
            try m.ready(now: now)
        }
    }

    /// The link is open for local clients (`transition` opens it): sticky sends, then the queue,
    /// then new sends.
    private func opened(generation: Int, reason: String, _ transition: (inout Machine, MonotonicInstant) throws -> Machine.Action) {
        let reconnects = self.machine.reconnects
        self.input("connected", reason: reason, transition)
        if self.machine.reconnects > reconnects { self.metrics.reconnected(after: self.lostBecause) }
        guard self.machine.phase == .open else { return }
        self.scheduleFailback()
        let sticky = self.session.becameReady()
        for message in sticky { self.writeFrame(message, flush: false) }
        if !sticky.isEmpty {
            self.attempt.channel?.flush()
            self.logger.debug("sent \(sticky.count) sticky message(s)")
        }
        self.flushOutbound()
        self.startHeartbeat(generation: generation)
    }

    func attemptFailed(generation: Int, _ description: String) {
        self.attemptFailed(generation: generation, AttemptFailure(description: description))
    }

    func attemptFailed(generation: Int, _ failure: AttemptFailure) {
        guard self.attempt.isCurrent(generation), self.machine.attemptStep != nil else { return }
        let description = failure.description
        self.teardown()
        self.attempt.failed(failure)
        self.metrics.attemptFailed(failure.kind)
        // With fallbacks, each failed attempt moves to the next URL (the backoff is the same).
        let urls = self.configuration.upstream.urls
        let failedURL = self.url
        let nextURL = self.failover.attemptFailed(urls: urls)
        self.input("connectFailed", reason: description) { m, now in try m.connectFailed(.error(description), now: now) }
        // One line per failed attempt: what failed, and what happens next.
        let next: String
        switch self.machine.phase {
        case .backingOff:
            let wait = self.machine.retryAt.map { max(.zero, $0 - Self.now()) } ?? .zero
            next = "retrying in \(wait.short)"
        case .waitingForNetwork:
            next = "waiting for the network to come back"
        case .idle:
            next = "giving up after backoff.max_attempts = \(self.configuration.backoff.maxAttempts) attempts; `wsbridgectl connect` tries again"
        default:
            next = "now \(self.machine.phase.rawValue)"
        }
        let target = urls.count > 1 ? " to \(failedURL)" : ""
        let then = nextURL.map { self.machine.phase == .backingOff ? ", to \($0)" : "" } ?? ""
        self.logger.warning(
            "connect failed (attempt \(self.attempt.number)\(target)): \(description); \(next)\(then)",
            metadata: ["attempt": "\(self.attempt.number)", "reason": "\(failure.kind.rawValue)"]
        )
    }

    func channelClosed(generation: Int) {
        guard self.attempt.isCurrent(generation) else { return }
        let phase = self.machine.phase
        if let step = self.machine.attemptStep {
            let during = step == .awaitingReady ? "while waiting for upstream.ready_when" : "during the handshake"
            let closed = self.attempt.serverClose.map { c in
                "the server closed the connection \(during) (code \(c.code.map(String.init) ?? "none")\(c.reason.isEmpty ? "" : ": \(c.reason)"))"
            }
            self.attemptFailed(generation: generation, self.attempt.error ?? closed ?? "connection closed \(during)")
            return
        }
        guard phase == .open || phase == .closing else { return }
        let reason: DisconnectReason
        if let close = self.attempt.serverClose {
            reason = .serverClosed(code: close.code, reason: close.reason)
        } else if let error = self.attempt.error {
            reason = .error(error)
        } else {
            reason = .error("connection ended without a close frame")
        }
        let lastSent = self.session.lastSent
        let failuresBefore = self.machine.failures
        defer {
            // Closed sooner than backoff.stable_after (a failed attempt): name what was sent last.
            if self.machine.failures > failuresBefore, case .serverClosed = reason, let lastSent {
                let culprit = "the server closed the link right after open (\(reason)), the last message sent being \(lastSent)"
                self.session.culprit = culprit
                self.logger.warning("\(culprit)")
            } else if self.machine.failures == 0 {
                self.session.culprit = nil
            }
        }
        self.teardown()
        // Who closed: the machine knows (a close we sent is the user's or the daemon's, whatever
        // the server answered), so the state line says what it recorded.
        self.input("disconnected", reason: self.machine.lastDisconnect?.description ?? reason.description) { m, now in
            try m.disconnected(reason, now: now)
        }
    }

    /// Open on a fallback with `upstream.failback_after` set: after that long, back to the primary
    /// (a reconnect; if the primary still fails, the next attempt moves on through the list).
    func scheduleFailback() {
        self.failover.setFailback(nil)
        guard self.failover.onFallback, let after = self.configuration.upstream.failbackAfter else { return }
        let generation = self.attempt.generation
        self.failover.setFailback(
            self.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(after.nanoseconds)) {
                guard self.attempt.isCurrent(generation), self.phase == .open, self.failover.onFallback else { return }
                self.logger.notice(
                    "going back to the primary \(self.configuration.upstream.url) after \(after.short) on \(self.url) (upstream.failback_after)")
                self.failover.backToPrimary()
                self.reconnect()
            })
    }
}

// MARK: - Frames

/// Frames from the upstream, channel errors, and the close handshake (RFC 6455 §5.5.1, §7).
extension UpstreamLink {
    func receivedMessage(_ kind: UpstreamMessage.Kind, _ data: ByteBuffer, generation: Int) {
        guard self.attempt.isCurrent(generation) else { return }
        let read = self.attempt.readTime()
        if read.first { self.heartbeat.received() }
        self.traffic.received(bytes: data.readableBytes)
        let message = UpstreamMessage(kind: kind, data: data, receivedAtMillis: read.millis)
        if self.logger.logLevel <= .trace {
            self.logger.trace("message \(kind == .text ? "text" : "binary") \(data.readableBytes) bytes: \(message.preview)")
        }
        self.emit(.message(message))
        // Fanned out first, then the session sees it: the message that makes the link ready
        // reaches subscribers before the `open` state line.
        let awaitingReady = self.machine.attemptStep == .awaitingReady
        if self.session.observes(awaitingReady: awaitingReady), self.session.observe(message, awaitingReady: awaitingReady) {
            self.becameReady(generation: generation)
        }
    }

    /// The socket read that brought the last messages is done: the next read reads the clocks.
    func readComplete() {
        self.attempt.readComplete()
        self.emitReadComplete()
        if self.session.observes(awaitingReady: self.machine.attemptStep == .awaitingReady) { self.session.readComplete() }
    }

    func received(_ frame: WebSocketFrame, generation: Int) {
        guard self.attempt.isCurrent(generation) else { return }
        switch frame.opcode {
        case .ping:
            self.heartbeat.received()
            if self.attempt.mayWrite {
                let pong = WebSocketFrame(fin: true, opcode: .pong, maskKey: .random(), data: frame.unmaskedData)
                self.attempt.channel?.writeAndFlush(pong, promise: nil)
            }
        case .pong:
            var data = frame.unmaskedData
            let payload: UInt64? = data.readableBytes == 8 ? data.readInteger(as: UInt64.self) : nil
            if let rtt = self.heartbeat.receivedPong(payload: payload) {
                self.logger.debug("heartbeat rtt \(rtt.short)", metadata: ["heartbeat.rtt_ms": "\(Double(rtt.nanoseconds) / 1e6)"])
                self.metrics.roundTrip(rtt)
                self.emit(.roundTrip(rtt))
            }
        case .connectionClose:
            self.heartbeat.received()
            var data = frame.unmaskedData
            let code = data.readWebSocketErrorCode().map { UInt16(webSocketErrorCode: $0) }
            let reason = data.readString(length: data.readableBytes) ?? ""
            // Echoed if ours has not gone (RFC 6455 §5.5.1), then the server ends TCP.
            self.perform(self.attempt.closeHandshake { $0.received(code: code, reason: reason) })
        default:
            break
        }
    }

    func channelError(_ error: any Error, generation: Int) {
        guard self.attempt.isCurrent(generation) else { return }
        let description: String
        var closeCode: WebSocketErrorCode?
        switch error {
        case let e as UpstreamProtocolError:
            description = e.description
            closeCode = e.closeCode
        default:
            description = UpstreamConnector.describe(error)
        }
        self.logger.warning("upstream error: \(description)")
        self.attempt.failed(AttemptFailure(description: description))
        if let closeCode, self.phase == .open {
            self.sendClose(code: UInt16(webSocketErrorCode: closeCode), reason: "")
        }
        self.attempt.channel?.close(promise: nil)
    }

    /// Closes the connection with `code` (once: a second close frame never goes).
    func sendClose(code: UInt16, reason: String) {
        self.perform(self.attempt.closeHandshake { $0.close(code: code, reason: reason) })
    }

    /// Writes our close frame when the handshake says so, and waits for the server to end TCP.
    private func perform(_ action: CloseHandshake.Action) {
        guard case .sendClose(let code, let reason) = action, let channel = self.attempt.channel else { return }
        var buffer = channel.allocator.buffer(capacity: 2 + reason.utf8.count)
        buffer.writeInteger(code)
        buffer.writeString(String(reason.utf8.prefix(123)) ?? "")
        let frame = WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: buffer)
        channel.writeAndFlush(frame, promise: nil)
        let generation = self.attempt.generation
        let timer = self.eventLoop.assumeIsolated().scheduleTask(in: Self.closeTimeout) {
            guard self.attempt.isCurrent(generation) else { return }
            self.logger.info("server did not end the connection after the close handshake; closing it")
            self.attempt.channel?.close(promise: nil)
        }
        self.attempt.awaitEnd(timer)
    }
}

// MARK: - Heartbeat

extension UpstreamLink {
    /// The link opened: the heartbeat starts, writing on this connection until it ends.
    func startHeartbeat(generation: Int) {
        self.heartbeat.start(
            interval: self.configuration.heartbeat.interval, deadline: self.configuration.heartbeat.deadline,
            ping: { payload in
                guard self.attempt.isCurrent(generation), let channel = self.attempt.channel else { return }
                var buffer = channel.allocator.buffer(capacity: 8)
                buffer.writeInteger(payload)
                channel.write(WebSocketFrame(fin: true, opcode: .ping, maskKey: .random(), data: buffer), promise: nil)
                if let text = self.configuration.heartbeat.text {
                    channel.write(WebSocketFrame(fin: true, opcode: .text, maskKey: .random(), data: channel.allocator.buffer(string: text)), promise: nil)
                }
                channel.flush()
            },
            dead: { silence in
                guard self.attempt.isCurrent(generation) else { return }
                // Dead link: no close handshake is possible; drop TCP and reconnect.
                self.drop(because: .heartbeatTimeout(silence: silence), input: "heartbeatTimeout")
            })
    }

    /// A reload: a running heartbeat takes the new interval and deadline.
    func updateHeartbeat() {
        self.heartbeat.update(interval: self.configuration.heartbeat.interval, deadline: self.configuration.heartbeat.deadline)
    }

    /// After a suspend/resume or a network change: ping now and start the deadline.
    func checkLiveness(why: String) {
        guard self.heartbeat.isRunning else { return }
        self.logger.info("heartbeat: liveness check: \(why)")
        self.heartbeat.checkNow()
    }
}

// MARK: - Sending

/// Sends: now when the link is open and writable, else into the bounded outbound queue, which
/// is flushed in order when the link opens or becomes writable again. With `queue.spool` set,
/// a queued send is stored in the spool before it is answered and joins the queue (in order)
/// once stored; a stored message leaves the spool once the socket took it.
extension UpstreamLink {
    /// Sends a message on the open link, or queues it (bounded) until the link opens.
    func send(_ message: UpstreamMessage) -> SendOutcome {
        if self.machine.isShuttingDown {
            return .rejected("wsbridged is shutting down; the message was not sent")
        }
        return self.outbound.send(message, on: self)
    }

    /// The spool stored (or refused) the sends up to `stored.through`.
    func spoolStored(_ stored: Spool.Stored) {
        if self.outbound.stored(stored) { self.flushOutbound() }
    }

    /// Writes a message now if it may go now: the link is open, no close frame has been sent
    /// (RFC 6455 §5.5.1: no data after it; the message waits for the next connection), and the
    /// channel is writable (a slow upstream fills the bounded queue, not NIO's buffer).
    func sendNow(_ message: UpstreamMessage, flush: Bool = true, promise: EventLoopPromise<Void>? = nil) -> Bool {
        guard self.phase == .open, self.attempt.channel?.isWritable == true else { return false }
        return self.writeFrame(message, flush: flush, promise: promise)
    }

    /// Writes on the connection, open or still waiting to be ready, whether or not the channel
    /// is writable: what `sendNow` sends once it checked, and the session's own messages (opening
    /// and sticky sends), which are few and bounded (`upstream.on_open`, `local.sticky_bytes`)
    /// and must go ahead of the queue. False when there is no connection to write to, or a
    /// close frame was sent.
    @discardableResult
    func writeFrame(_ message: UpstreamMessage, flush: Bool = true, promise: EventLoopPromise<Void>? = nil) -> Bool {
        guard self.attempt.mayWrite, let channel = self.attempt.channel else { return false }
        // With permessage-deflate, PerMessageDeflateHandler compresses it on the way out.
        let frame = WebSocketFrame(fin: true, opcode: message.kind == .text ? .text : .binary, maskKey: .random(), data: message.data)
        self.traffic.sent(bytes: message.data.readableBytes)
        channel.write(frame, promise: promise)
        if flush { self.flushSoon() }
        return true
    }

    /// Flushes once the sends of this event-loop tick are written (a client's pipelined
    /// requests are handled in one tick): one flush through the pipeline and one writev for them
    /// all, where a flush per send cost some 4,900 instructions each. The flush runs in the same
    /// tick, after the work already queued, on the connection current then.
    private func flushSoon() {
        guard !self.flushScheduled else { return }
        self.flushScheduled = true
        self.eventLoop.assumeIsolated().execute {
            self.flushScheduled = false
            self.attempt.channel?.flush()
        }
    }

    /// A sticky send (or its leave text) from the local plane: written now if the link is
    /// open, ahead of any queued sends; false when it is not (it goes after the next open).
    func sendAhead(_ message: UpstreamMessage) -> Bool {
        guard self.phase == .open, !self.machine.isShuttingDown else { return false }
        return self.writeFrame(message)
    }

    /// Sends what waited, in order, with one flush, while the link takes it.
    func flushOutbound() {
        let count = self.outbound.flush(to: self)
        guard count > 0 else { return }
        self.attempt.channel?.flush()
        self.logger.debug("sent \(count) queued message(s)", metadata: ["queue.left": "\(self.outbound.count)"])
    }

    func becameWritable(generation: Int) {
        guard self.attempt.isCurrent(generation) else { return }
        self.flushOutbound()
    }
}

// MARK: - Status

/// The snapshot `status` reports: the link is the one source of truth for its part; the plane
/// adds its own counters (subscribers, clients, seq, drops).
extension UpstreamLink {
    var status: StatusReport {
        var report = StatusReport()
        report.state = self.machine.phase
        report.since = self.phaseSinceWall
        report.url = "\(self.url)"
        report.reconnects = self.machine.reconnects
        report.failedAttempts = self.machine.failures
        report.rttMs = self.heartbeat.roundTripTime.map { Double($0.nanoseconds) / 1e6 }
        report.subprotocol = self.attempt.subprotocol
        report.compression = self.attempt.compression
        report.traffic = self.traffic
        report.queue = self.outbound.status(fsync: self.configuration.queue.fsync)
        let ready = self.machine.attemptStep == .awaitingReady ? "waiting" : self.machine.phase == .open ? "ready" : "down"
        report.session = self.session.status(ready: ready)
        report.lastError = self.attempt.lastFailure?.description
        report.lastErrorReason = self.attempt.lastFailure?.kind.rawValue
        // The last link that was open and ended; failed attempts show in last_error instead.
        report.lastClose = self.lostBecause?.close
        if let at = self.machine.retryAt {
            report.retryInMs = max(0, (at - Self.now()).nanoseconds / 1_000_000)
        }
        return report
    }
}

@available(*, unavailable)
extension UpstreamLink: Sendable {}
