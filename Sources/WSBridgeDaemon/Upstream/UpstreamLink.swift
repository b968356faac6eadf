import Logging
import NIOCore
import NIOWebSocket
import WSBridgeCore

/// Drives the upstream WebSocket: owns the connection and heartbeat state machines, performs
/// their actions (connect, timers, close frames), and turns channel events back into inputs.
/// This file: the state and the driver. Attempts (UpstreamLink+Attempt), frames and the close
/// handshake (+Frames), the heartbeat (+Heartbeat), sends and the queue (+Sending) and the
/// status snapshot (+Status) are extensions beside it.
///
/// Confined to one event loop: every method runs there. Other threads use `UpstreamLinkHandle`.
/// Each attempt gets a generation number; callbacks from an older attempt are ignored, so a
/// late handshake or close can never confuse the state machine. Its state is read by the local
/// plane through `LinkControl`, and its events go to one `UpstreamEventSink`.
public final class UpstreamLink: LinkControl {
    public typealias Machine = ConnectionStateMachine<SystemRandomNumberGenerator>

    let eventLoop: any EventLoop
    private(set) var configuration: Configuration
    let environment: [String: String]
    let logger: Logger
    private let events: any UpstreamEventSink
    /// Reads the token and builds the TLS context off the loop (cached).
    let connectors: ConnectorFactory
    let metrics: DaemonMetrics
    /// What is restored on every open: opening messages, the ready gate, sticky sends.
    let session: UpstreamSession

    private(set) var machine: Machine
    var heartbeat: HeartbeatStateMachine?
    var generation = 0
    var channel: (any Channel)?
    var subprotocol: String?
    /// permessage-deflate was negotiated on the open link (its handler compresses sends).
    var compression = false
    var heartbeatTimer: Scheduled<Void>?
    var retryTimer: Scheduled<Void>?
    /// The attempt's deadline: `upstream.connect_timeout` until the upgrade, then
    /// `upstream.ready_timeout` while the session waits for `ready_when`.
    var connectTimer: Scheduled<Void>?
    var closeTimer: Scheduled<Void>?
    var receivedClose: (code: UInt16?, reason: String)?
    var sentClose = false
    var linkError: String?
    var lastError: AttemptFailure?
    private let stopped: EventLoopPromise<Void>
    /// The URL of the current (or last) attempt: what `status` shows while it is live, even
    /// after a reload changed `upstream.url` for the next one.
    var attemptURL: UpstreamURL?
    var outbound: OutboundQueue
    /// The durable spool (`queue.spool`), when set: queued sends are stored there first.
    let spool: Spool?
    /// The id of the last message given to the spool.
    var lastSpoolID: UInt64 = 0
    /// Spooled messages handed to the connection and not yet taken by its socket.
    var inFlight = CircularBuffer<(entry: OutboundQueue.Entry, generation: Int)>()
    /// The highest spooled id the socket took in this tick (reported to the spool once per tick).
    var deliveredThrough: UInt64?
    /// Sends the spool is writing: they join the queue, in order, once it has them.
    var spooling = CircularBuffer<PendingSpoolWrite>()
    var phaseSinceWall = WallClock.millisecondsSinceEpoch()
    var messagesIn: UInt64 = 0
    /// The number of the current (or last) connection attempt, for the log.
    var attemptNumber = 0
    /// Which of `upstream.urls` (the primary, then the fallbacks) the next attempt uses.
    var urlIndex = 0
    /// While on a fallback: the return to the primary (`upstream.failback_after`).
    var failbackTimer: Scheduled<Void>?
    /// Why the last open link ended (not a later failed attempt): the reconnect's metric label.
    var lostBecause: DisconnectReason?
    /// The wall-clock receive time of the socket read being handled (nil between reads).
    var readWallMillis: Int64?
    var bytesIn: UInt64 = 0
    var messagesOut: UInt64 = 0
    var bytesOut: UInt64 = 0
    /// Set by `shutdown()`: no more sends are accepted.
    var stopping = false
    /// How long to wait for the server to end the TCP connection after a close handshake.
    static let closeTimeout: TimeAmount = .seconds(3)

    init(
        configuration: Configuration,
        networkAvailable: Bool,
        environment: [String: String],
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
        self.environment = environment
        var logger = logger
        logger[metadataKey: "upstream.url"] = "\(configuration.upstream.url)"
        self.logger = logger
        self.events = events
        self.connectors = connectors
        self.stopped = eventLoop.makePromise()
        self.outbound = OutboundQueue(maxMessages: configuration.queue.maxMessages, maxBytes: configuration.queue.maxBytes)
        self.spool = spool?.0
        if let restored = spool?.1 {
            // What the last run left queued goes first, even if the bounds have shrunk since.
            let entries = restored.entries.map { e in
                OutboundQueue.Entry(message: UpstreamMessage(kind: e.kind, data: e.data, receivedAtMillis: 0), spoolID: e.id)
            }
            self.outbound.restore(entries, atFront: false)
            self.lastSpoolID = restored.lastID
        }
        self.machine = Machine(
            settings: .init(backoff: configuration.backoff.policy, maxAttempts: configuration.backoff.maxAttempts),
            networkAvailable: networkAvailable,
            now: Self.now(),
            generator: SystemRandomNumberGenerator()
        )
        if let spool = self.spool {
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
    var roundTripTime: Duration? { self.heartbeat?.roundTripTime }
    var url: UpstreamURL { self.attemptURL ?? self.configuration.upstream.url }

    func emit(_ event: UpstreamEvent) {
        self.events.upstreamLink(self, emitted: event)
    }
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

    /// Applies a reloaded configuration to what can change on a live link.
    func update(configuration: Configuration) {
        self.configuration = configuration
        if self.urlIndex >= configuration.upstream.urls.count { self.urlIndex = 0 }
        // A changed upstream.failback_after applies to the link open now.
        if self.machine.phase == .open { self.scheduleFailback() }
        self.outbound.maxMessages = configuration.queue.maxMessages
        self.outbound.maxBytes = configuration.queue.maxBytes
        self.spool?.setFsync(configuration.queue.fsync)
        self.session.update(configuration: configuration)
        self.machine.updateSettings(.init(backoff: configuration.backoff.policy, maxAttempts: configuration.backoff.maxAttempts))
        if self.heartbeat != nil {
            self.heartbeat?.update(interval: configuration.heartbeat.interval, deadline: configuration.heartbeat.deadline, now: Self.now())
            self.runHeartbeat(generation: self.generation)
        }
    }

    // MARK: - Driving the machine

    /// `reason` is read after the machine took the input (it may describe what the machine recorded).
    func input(_ name: String, reason: @autoclosure () -> String, _ body: (inout Machine, MonotonicInstant) throws -> Machine.Action) {
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
            if before == .open || before == .closing { self.lostBecause = self.machine.lastDisconnect }
            self.phaseSinceWall = WallClock.millisecondsSinceEpoch()
            var metadata: Logger.Metadata = ["state.from": "\(before.rawValue)", "state.to": "\(after.rawValue)", "reason": "\(reason())"]
            if after == .open, let p = self.subprotocol { metadata["upstream.subprotocol"] = "\(p)" }
            // Retry cycles (connecting <-> backingOff) at debug: each failure is one warning already.
            let cycling = (before == .connecting && after == .backingOff) || (before == .backingOff && after == .connecting)
            self.logger.log(level: cycling ? .debug : .notice, "state \(before.rawValue) -> \(after.rawValue): \(reason())", metadata: metadata)
            self.emit(.state(after, reason: reason()))
            if after == .stopped { self.stopped.succeed(()) }
        }
    }

    func perform(_ action: Machine.Action) {
        switch action {
        case .none:
            break
        case .connect(let attempt):
            self.startAttempt(attempt)
        case .scheduleRetry(let delay, let attempt):
            let generation = self.generation
            self.logger.debug(
                "retrying in \(delay.short) (attempt \(attempt))",
                metadata: ["backoff.delay_ms": "\(delay.nanoseconds / 1_000_000)", "backoff.attempt": "\(attempt)"]
            )
            self.emit(.retryScheduled(attempt: attempt, delay: delay))
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
    func teardown() {
        self.generation += 1
        self.connectTimer?.cancel()
        self.connectTimer = nil
        self.closeTimer?.cancel()
        self.closeTimer = nil
        self.stopHeartbeat()
        self.channel?.close(promise: nil)
        self.channel = nil
        self.subprotocol = nil
        self.compression = false
        self.session.ended()
    }

    func stopHeartbeat() {
        self.heartbeatTimer?.cancel()
        self.heartbeatTimer = nil
        self.heartbeat = nil
    }

}

@available(*, unavailable)
extension UpstreamLink: Sendable {}

/// A send the spool is writing, answered once it is stored.
struct PendingSpoolWrite {
    var id: UInt64
    var message: UpstreamMessage
    var promise: EventLoopPromise<SendOutcome>
}
