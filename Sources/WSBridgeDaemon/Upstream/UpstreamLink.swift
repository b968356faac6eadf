import Logging
import NIOCore
import NIOWebSocket
import WSBridgeCore

/// Drives the upstream WebSocket: owns the connection and heartbeat state machines, performs
/// their actions (connect, timers, close frames), and turns channel events back into inputs.
///
/// Confined to one event loop: every method runs there. Other threads use `UpstreamLinkHandle`.
/// Each attempt gets a generation number; callbacks from an older attempt are ignored, so a
/// late handshake or close can never confuse the state machine.
public final class UpstreamLink {
    public typealias Machine = ConnectionStateMachine<SystemRandomNumberGenerator>

    let eventLoop: any EventLoop
    private(set) var configuration: Configuration
    private let environment: [String: String]
    private let logger: Logger
    private let onEvent: @Sendable (UpstreamEvent) -> Void

    private(set) var machine: Machine
    private var heartbeat: HeartbeatStateMachine?
    private var generation = 0
    private var channel: (any Channel)?
    private var subprotocol: String?
    /// The open link's frame handler (for permessage-deflate on sends).
    private var frameHandler: UpstreamFrameHandler?
    private var heartbeatTimer: Scheduled<Void>?
    private var retryTimer: Scheduled<Void>?
    private var connectTimer: Scheduled<Void>?
    private var closeTimer: Scheduled<Void>?
    private var receivedClose: (code: UInt16?, reason: String)?
    private var sentClose = false
    private var linkError: String?
    private var lastError: String?
    private var stopped: EventLoopPromise<Void>
    private var outbound: OutboundQueue
    private var phaseSinceWall = WallClock.millisecondsSinceEpoch()
    private var messagesIn: UInt64 = 0
    private var bytesIn: UInt64 = 0
    private var messagesOut: UInt64 = 0
    private var bytesOut: UInt64 = 0
    /// Set by `shutdown()`: no more sends are accepted.
    private var stopping = false
    /// How long to wait for the server to end the TCP connection after a close handshake.
    static let closeTimeout: TimeAmount = .seconds(3)

    init(
        configuration: Configuration,
        networkAvailable: Bool,
        environment: [String: String],
        eventLoop: any EventLoop,
        logger: Logger,
        onEvent: @escaping @Sendable (UpstreamEvent) -> Void
    ) {
        self.eventLoop = eventLoop
        self.configuration = configuration
        self.environment = environment
        var logger = logger
        logger[metadataKey: "upstream.url"] = "\(configuration.upstream.url)"
        self.logger = logger
        self.onEvent = onEvent
        self.stopped = eventLoop.makePromise()
        self.outbound = OutboundQueue(maxMessages: configuration.queue.maxMessages, maxBytes: configuration.queue.maxBytes)
        self.machine = Machine(
            settings: .init(backoff: configuration.backoff.policy, maxAttempts: configuration.backoff.maxAttempts),
            networkAvailable: networkAvailable,
            now: Self.now(),
            generator: SystemRandomNumberGenerator()
        )
    }

    static func now() -> MonotonicInstant {
        MonotonicInstant(nanoseconds: NIODeadline.now().uptimeNanoseconds)
    }

    // MARK: - Inputs

    var phase: ConnectionPhase { self.machine.phase }
    var roundTripTime: Duration? { self.heartbeat?.roundTripTime }
    var stoppedFuture: EventLoopFuture<Void> { self.stopped.futureResult }

    func connect() {
        self.input("connect", reason: "connect requested") { m, now in try m.connectRequested(now: now) }
    }

    func reconnect() {
        self.input("reconnect", reason: "reconnect requested") { m, now in try m.reconnectRequested(now: now) }
    }

    func close(code: UInt16, reason: String) {
        self.input("close", reason: "close requested (code \(code))") { m, now in m.userClose(code: code, reason: reason, now: now) }
    }

    func shutdown() -> EventLoopFuture<Void> {
        self.stopping = true
        self.input("shutdown", reason: "daemon stopping") { m, now in m.shutdown(now: now) }
        return self.stopped.futureResult
    }

    func networkChanged(available: Bool) {
        guard available != self.machine.networkAvailable else { return }
        self.logger.info(available ? "network: route to upstream available" : "network: no route to upstream")
        let reason = available ? "network available" : "network lost: no route to the upstream host"
        self.input("network", reason: reason) { m, now in m.networkChanged(available: available, now: now) }
    }

    /// After a suspend/resume or a network change: ping now and start the deadline.
    func checkLiveness(why: String) {
        guard self.heartbeat != nil else { return }
        self.logger.info("heartbeat: liveness check: \(why)")
        self.heartbeat?.checkNow(now: Self.now())
        self.runHeartbeat(generation: self.generation)
    }

    /// Applies a reloaded configuration to what can change on a live link.
    func update(configuration: Configuration) {
        self.configuration = configuration
        self.outbound.maxMessages = configuration.queue.maxMessages
        self.outbound.maxBytes = configuration.queue.maxBytes
        self.machine.updateSettings(.init(backoff: configuration.backoff.policy, maxAttempts: configuration.backoff.maxAttempts))
        if self.heartbeat != nil {
            self.heartbeat?.update(interval: configuration.heartbeat.interval, deadline: configuration.heartbeat.deadline, now: Self.now())
            self.runHeartbeat(generation: self.generation)
        }
    }

    /// Sends a message on the open link, or queues it (bounded) until the link opens.
    func submit(_ message: UpstreamMessage) -> SendOutcome {
        if self.stopping {
            return .rejected("wsbridged is shutting down; the message was not sent")
        }
        if self.outbound.isEmpty, self.write(message) {
            return .sent
        }
        if let problem = self.outbound.append(message) {
            return .rejected(problem)
        }
        return .queued(depth: self.outbound.count)
    }

    /// Sends a message if the link is open. Returns false when it is not.
    func send(_ message: UpstreamMessage) -> Bool {
        self.write(message)
    }

    /// Writes a message now if it may go now: the link is open, no close frame has been sent
    /// (RFC 6455 §5.5.1: no data after it; the message waits for the next connection), and the
    /// channel is writable (a slow upstream fills the bounded queue, not NIO's buffer).
    private func write(_ message: UpstreamMessage, flush: Bool = true) -> Bool {
        guard self.machine.phase == .open, !self.sentClose, let channel = self.channel, channel.isWritable else { return false }
        var data = message.data
        var compressed = false
        if let deflate = self.frameHandler?.deflate {
            do {
                data = try deflate.compress(message.data, allocator: channel.allocator)
                compressed = true
            } catch {
                self.logger.error("cannot compress an outbound message: \(error); sending it uncompressed")
            }
        }
        let frame = WebSocketFrame(
            fin: true,
            rsv1: compressed,
            opcode: message.kind == .text ? .text : .binary,
            maskKey: .random(),
            data: data
        )
        self.messagesOut += 1
        self.bytesOut += UInt64(message.data.readableBytes)
        if flush {
            channel.writeAndFlush(frame, promise: nil)
        } else {
            channel.write(frame, promise: nil)
        }
        return true
    }

    /// Sends what waited, in order, with one flush, while the link takes it.
    private func flushOutbound() {
        var count = 0
        while let message = self.outbound.first, self.write(message, flush: false) {
            _ = self.outbound.removeFirst()
            count += 1
        }
        guard count > 0 else { return }
        self.channel?.flush()
        self.logger.debug("sent \(count) queued message(s)", metadata: ["queue.left": "\(self.outbound.count)"])
    }

    private func becameWritable(generation: Int) {
        guard generation == self.generation else { return }
        self.flushOutbound()
    }

    var status: LinkStatus {
        let close: (UInt16?, String, String)? = self.machine.lastDisconnect.map { reason in
            switch reason {
            case .serverClosed(let code, let r): (code, r, "server")
            case .userClosed(let code, let r): (code, r, "user")
            case .error(let e): (nil, e, "error")
            case .heartbeatTimeout: (nil, reason.description, "error")
            case .networkLost: (nil, reason.description, "error")
            }
        }
        var retryIn: Int64?
        if let at = self.machine.retryAt {
            retryIn = max(0, (at - Self.now()).nanoseconds / 1_000_000)
        }
        return LinkStatus(
            phase: self.machine.phase.rawValue,
            sinceMillis: self.phaseSinceWall,
            url: "\(self.configuration.upstream.url)",
            lastClose: close,
            lastError: self.lastError,
            reconnects: self.machine.reconnects,
            failures: self.machine.failures,
            rttMillis: self.heartbeat?.roundTripTime.map { Double($0.nanoseconds) / 1e6 },
            subprotocol: self.subprotocol,
            compression: self.frameHandler?.deflate != nil,
            messagesIn: self.messagesIn,
            bytesIn: self.bytesIn,
            messagesOut: self.messagesOut,
            bytesOut: self.bytesOut,
            queuedMessages: self.outbound.count,
            queuedBytes: self.outbound.bytes,
            queueMaxMessages: self.outbound.maxMessages,
            queueMaxBytes: self.outbound.maxBytes,
            retryInMillis: retryIn
        )
    }

    // MARK: - Driving the machine

    private func input(_ name: String, reason: String, _ body: (inout Machine, MonotonicInstant) throws -> Machine.Action) {
        let before = self.machine.phase
        let action: Machine.Action
        do {
            action = try body(&self.machine, Self.now())
        } catch {
            self.logger.error("bug: state machine refused input", metadata: ["error": "\(error)"])
            return
        }
        self.perform(action)
        let after = self.machine.phase
        if after != .backingOff, let timer = self.retryTimer {
            timer.cancel()
            self.retryTimer = nil
        }
        if after != .open && after != .closing {
            self.stopHeartbeat()
        }
        if before != after {
            self.phaseSinceWall = WallClock.millisecondsSinceEpoch()
            var metadata: Logger.Metadata = ["state.from": "\(before.rawValue)", "state.to": "\(after.rawValue)", "reason": "\(reason)"]
            if after == .open, let p = self.subprotocol { metadata["upstream.subprotocol"] = "\(p)" }
            self.logger.notice("state \(before.rawValue) -> \(after.rawValue): \(reason)", metadata: metadata)
            self.onEvent(.state(after, reason: reason))
            if after == .stopped { self.stopped.succeed(()) }
        }
    }

    private func perform(_ action: Machine.Action) {
        switch action {
        case .none:
            break
        case .connect(let attempt):
            self.startAttempt(attempt)
        case .scheduleRetry(let delay, let attempt):
            let generation = self.generation
            self.logger.info(
                "retrying in \(delay.short) (attempt \(attempt))",
                metadata: ["backoff.delay_ms": "\(delay.nanoseconds / 1_000_000)", "backoff.attempt": "\(attempt)"]
            )
            self.onEvent(.retryScheduled(attempt: attempt, delay: delay))
            self.retryTimer?.cancel()
            self.retryTimer = self.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(delay.nanoseconds)) {
                guard generation == self.generation else { return }
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
    private func teardown() {
        self.generation += 1
        self.connectTimer?.cancel()
        self.connectTimer = nil
        self.closeTimer?.cancel()
        self.closeTimer = nil
        self.stopHeartbeat()
        self.channel?.close(promise: nil)
        self.channel = nil
        self.subprotocol = nil
        self.frameHandler = nil
    }

    private func stopHeartbeat() {
        self.heartbeatTimer?.cancel()
        self.heartbeatTimer = nil
        self.heartbeat = nil
    }

    // MARK: - Attempts

    private func startAttempt(_ attempt: Int) {
        self.teardown()
        let generation = self.generation
        self.receivedClose = nil
        self.sentClose = false
        self.linkError = nil
        self.onEvent(.attempt(number: attempt))
        self.logger.info("connecting (attempt \(attempt))", metadata: ["attempt": "\(attempt)"])

        var token: String?
        if let path = self.configuration.auth.tokenFile {
            switch TokenFile.read(path: path) {
            case .success(let t):
                token = t
            case .failure(let error):
                // Fail the attempt on the next tick so the machine sees it as a normal failure.
                self.eventLoop.assumeIsolated().execute {
                    self.attemptFailed(generation: generation, "\(error)")
                }
                return
            }
        }
        let proxy = UpstreamConnector.proxy(for: self.configuration, environment: self.environment)
        if self.configuration.tls.insecure && self.configuration.upstream.url.isTLS {
            self.logger.warning("tls.insecure = true: the upstream's certificate is NOT verified; anyone on the path can read and change this link")
        }
        let connector = UpstreamConnector(
            upstream: self.configuration.upstream,
            tls: self.configuration.tls,
            proxy: proxy,
            token: token
        )
        let bound = NIOLoopBound(self, eventLoop: self.eventLoop)
        let maxMessageSize = self.configuration.upstream.maxMessageSize
        let attemptFutures = connector.connect(on: self.eventLoop) { channel, deflate in
            let handler = UpstreamFrameHandler(
                callbacks: .init(
                    message: { kind, data in bound.value.receivedMessage(kind, data, generation: generation) },
                    control: { frame in bound.value.received(frame, generation: generation) },
                    error: { error in bound.value.channelError(error, generation: generation) },
                    writable: { bound.value.becameWritable(generation: generation) }
                ),
                maxMessageSize: maxMessageSize,
                deflate: try deflate.map { try PerMessageDeflate(parameters: $0) },
                // The connector puts a TextStreamValidator in front of the frame decoder.
                textCheckedUpstream: true
            )
            if generation == bound.value.generation { bound.value.frameHandler = handler }
            return handler
        }
        let timeout = self.configuration.upstream.connectTimeout
        self.connectTimer = self.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(timeout.nanoseconds)) {
            self.attemptFailed(
                generation: generation,
                "timed out after \(timeout.short) waiting for TCP connect, TLS and the WebSocket upgrade (upstream.connect_timeout)"
            )
        }
        attemptFutures.channel.assumeIsolated().whenSuccess { channel in
            guard generation == self.generation else {
                channel.close(promise: nil)
                return
            }
            self.channel = channel
            channel.closeFuture.assumeIsolated().whenComplete { _ in
                self.channelClosed(generation: generation)
            }
        }
        attemptFutures.handshake.assumeIsolated().whenComplete { result in
            switch result {
            case .success(let handshake):
                self.handshakeSucceeded(handshake, generation: generation)
            case .failure(let error):
                self.attemptFailed(generation: generation, "\(error)")
            }
        }
    }

    private func handshakeSucceeded(_ handshake: UpstreamConnector.Handshake, generation: Int) {
        guard generation == self.generation, self.machine.phase == .connecting else {
            handshake.channel.close(promise: nil)
            return
        }
        self.connectTimer?.cancel()
        self.connectTimer = nil
        self.channel = handshake.channel
        self.subprotocol = handshake.subprotocol
        var details: [String] = []
        if let p = handshake.subprotocol { details.append("subprotocol \(p)") }
        if handshake.deflate != nil { details.append("permessage-deflate") }
        let reason = details.isEmpty ? "connected" : "connected (\(details.joined(separator: ", ")))"
        self.input("connected", reason: reason) { m, now in try m.connectSucceeded(now: now) }
        guard self.machine.phase == .open else { return }
        self.flushOutbound()
        self.heartbeat = HeartbeatStateMachine(
            interval: self.configuration.heartbeat.interval,
            deadline: self.configuration.heartbeat.deadline,
            now: Self.now()
        )
        self.runHeartbeat(generation: generation)
    }

    private func attemptFailed(generation: Int, _ description: String) {
        guard generation == self.generation, self.machine.phase == .connecting else { return }
        self.teardown()
        self.lastError = description
        self.logger.warning("connect failed: \(description)")
        self.input("connectFailed", reason: description) { m, now in try m.connectFailed(.error(description), now: now) }
    }

    private func channelClosed(generation: Int) {
        guard generation == self.generation else { return }
        let phase = self.machine.phase
        if phase == .connecting {
            self.attemptFailed(generation: generation, self.linkError ?? "connection closed during the handshake")
            return
        }
        guard phase == .open || phase == .closing else { return }
        let reason: DisconnectReason
        if let close = self.receivedClose {
            reason = .serverClosed(code: close.code, reason: close.reason)
        } else if let error = self.linkError {
            reason = .error(error)
        } else {
            reason = .error("connection ended without a close frame")
        }
        self.teardown()
        self.input("disconnected", reason: reason.description) { m, now in try m.disconnected(reason, now: now) }
    }

    // MARK: - Frames

    private func receivedMessage(_ kind: UpstreamMessage.Kind, _ data: ByteBuffer, generation: Int) {
        guard generation == self.generation else { return }
        self.heartbeat?.received(now: Self.now())
        self.messagesIn += 1
        self.bytesIn += UInt64(data.readableBytes)
        self.onEvent(.message(UpstreamMessage(kind: kind, data: data, receivedAtMillis: WallClock.millisecondsSinceEpoch())))
    }

    private func received(_ frame: WebSocketFrame, generation: Int) {
        guard generation == self.generation else { return }
        let now = Self.now()
        switch frame.opcode {
        case .ping:
            self.heartbeat?.received(now: now)
            if !self.sentClose {
                let pong = WebSocketFrame(fin: true, opcode: .pong, maskKey: .random(), data: frame.unmaskedData)
                self.channel?.writeAndFlush(pong, promise: nil)
            }
        case .pong:
            var data = frame.unmaskedData
            let payload: UInt64? = data.readableBytes == 8 ? data.readInteger(as: UInt64.self) : nil
            if let rtt = self.heartbeat?.receivedPong(payload: payload, now: now) {
                self.logger.debug("heartbeat: pong", metadata: ["heartbeat.rtt_ms": "\(Double(rtt.nanoseconds) / 1e6)"])
                self.onEvent(.roundTrip(rtt))
            }
        case .connectionClose:
            self.heartbeat?.received(now: now)
            var data = frame.unmaskedData
            let code = data.readableBytes >= 2 ? data.readInteger(as: UInt16.self) : nil
            let reason = data.readString(length: data.readableBytes) ?? ""
            // Only the first close frame counts; a peer must not send another.
            if self.receivedClose == nil { self.receivedClose = (code, reason) }
            if !self.sentClose {
                // Echo the close (RFC 6455 §5.5.1), then wait for the server to end TCP.
                self.sendClose(code: code ?? 1000, reason: "")
            }
        default:
            break
        }
    }

    private func channelError(_ error: any Error, generation: Int) {
        guard generation == self.generation else { return }
        let description: String
        var closeCode: UInt16 = 0
        switch error {
        case let e as UpstreamProtocolError:
            description = e.description
            closeCode = e.closeCode
        case NIOWebSocketError.invalidFrameLength:
            description = "upstream sent a frame larger than upstream.max_message_size (\(self.configuration.upstream.maxMessageSize) bytes)"
        case let e as NIOWebSocketError:
            description = "upstream violated the WebSocket protocol: \(e)"
        default:
            description = UpstreamConnector.describe(error)
        }
        self.logger.warning("upstream error: \(description)")
        self.lastError = description
        if self.linkError == nil { self.linkError = description }
        if error is NIOWebSocketError {
            // NIO's WebSocketProtocolErrorHandler already sent the close frame and closes the channel.
            self.sentClose = true
        } else if closeCode != 0 && !self.sentClose && self.machine.phase == .open {
            self.sendClose(code: closeCode, reason: "")
        }
        self.channel?.close(promise: nil)
    }

    private func sendClose(code: UInt16, reason: String) {
        guard let channel = self.channel, !self.sentClose else { return }
        self.sentClose = true
        var buffer = channel.allocator.buffer(capacity: 2 + reason.utf8.count)
        buffer.writeInteger(code)
        buffer.writeString(String(reason.utf8.prefix(123)) ?? "")
        let frame = WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: buffer)
        channel.writeAndFlush(frame, promise: nil)
        let generation = self.generation
        self.closeTimer?.cancel()
        self.closeTimer = self.eventLoop.assumeIsolated().scheduleTask(in: Self.closeTimeout) {
            guard generation == self.generation else { return }
            self.logger.info("server did not end the connection after the close handshake; closing it")
            self.channel?.close(promise: nil)
        }
    }

    // MARK: - Heartbeat

    private func runHeartbeat(generation: Int) {
        guard generation == self.generation, var heartbeat = self.heartbeat else { return }
        self.heartbeatTimer?.cancel()
        self.heartbeatTimer = nil
        let now = Self.now()
        var silence = Duration.zero
        loop: while true {
            switch heartbeat.next(now: now) {
            case .sendPing(let payload):
                if let channel = self.channel {
                    var buffer = channel.allocator.buffer(capacity: 8)
                    buffer.writeInteger(payload)
                    channel.write(WebSocketFrame(fin: true, opcode: .ping, maskKey: .random(), data: buffer), promise: nil)
                    if let text = self.configuration.heartbeat.text {
                        let data = channel.allocator.buffer(string: text)
                        channel.write(WebSocketFrame(fin: true, opcode: .text, maskKey: .random(), data: data), promise: nil)
                    }
                    channel.flush()
                }
            case .wait(let until):
                self.heartbeat = heartbeat
                self.heartbeatTimer = self.eventLoop.assumeIsolated().scheduleTask(
                    deadline: NIODeadline.uptimeNanoseconds(until.nanoseconds)
                ) {
                    self.heartbeatTimer = nil
                    self.runHeartbeat(generation: generation)
                }
                return
            case .dead(let s):
                silence = s
                break loop
            }
        }
        // Dead link: no close handshake is possible; drop TCP and reconnect.
        let reason = DisconnectReason.heartbeatTimeout(silence: silence)
        self.lastError = reason.description
        self.logger.warning("upstream dead: \(reason)")
        self.teardown()
        self.input("heartbeatTimeout", reason: reason.description) { m, now in try m.disconnected(reason, now: now) }
    }
}

@available(*, unavailable)
extension UpstreamLink: Sendable {}
