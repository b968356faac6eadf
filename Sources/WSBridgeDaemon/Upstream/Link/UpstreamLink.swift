import Logging
import NIOCore
import NIOWebSocket
import WSBridgeCore
import WSBridgeProtocol

/// Drives the upstream WebSocket: feeds its machine (`LinkSupervisor`: the connection's life,
/// the retries, the failover, the renewal's decisions) and does what it returns (connect, timers,
/// close frames), logging and publishing each change of phase it tells; channel events come
/// back as inputs. This file holds the driver and every write to its own state (the machine, the
/// retry timer, why the last link ended, the traffic counters); the others read it and go through
/// its methods: `+Attempts` (one attempt, from the connector to open or failed), `+Frames`
/// (frames, channel errors, the close frames the machine decides), `+Sending` (pings, sends, the
/// queue's flush), `+Renewal`, `+Status`. The rest of its state lives in parts that change it
/// only through their methods: the current connection (`UpstreamConnection`: channel, timers,
/// pace; a new one for every attempt, whose callbacks never reach the link once it ended), the
/// renewal's connections (`Renewal`), the queue and spool (`OutboundPath`). Confined to one event
/// loop (other threads use `UpstreamLinkHandle`); the plane reads it through `LinkControl`; its
/// events go to one `UpstreamEventSink`.
package final class UpstreamLink: LinkControl {
    package typealias Machine = LinkStateMachine

    let eventLoop: any EventLoop
    private(set) var configuration: Configuration
    let logger: Logger
    let events: any UpstreamEventSink
    /// Reads the token and builds the TLS context off the loop (cached).
    let connectors: any UpstreamDialer
    let metrics: DaemonMetrics
    /// What is restored on every open: opening messages, the ready gate, sticky sends.
    let session: UpstreamSession
    /// Its place in a pool (`upstream.subscriptions_per_connection`): which sticky keys are its
    /// (`session.placement`). 0: the first, or the only, connection.
    let slot: Int

    // The parts, each with its state private to its own file (the others call their methods).
    /// The current connection: channel, close flags, timers, heartbeat, pace
    /// (UpstreamConnection.swift); a new one for every attempt.
    private(set) var connection: UpstreamConnection
    /// The last failure of any of its connections (`status` shows it, across attempts).
    private(set) var lastFailure: AttemptFailure?
    /// A renewal under way: the second connection, the overlap's dedupe, the old one closing
    /// (UpstreamLink+Renewal.swift).
    let renewal = Renewal()
    /// The queue, the spool and the sends on their way (UpstreamLink+Sending.swift).
    let outbound: OutboundPath
    /// What the link carried, kept as `status` reports it.
    private(set) var traffic = StatusReport.Traffic()
    /// Messages written after waiting for the pace, since the daemon started.
    private(set) var pacedMessages: UInt64 = 0
    /// The rule on connection attempts (`upstream.limits.connect_attempts`), shared by the
    /// daemon's connections.
    let connectAttempts: ConnectAttempts
    /// When the attempt waiting for `connect_attempts` may start (nil: none waits).
    private(set) var connectWaitUntil: MonotonicInstant?

    // The driver's own state: only this file changes it (the others read it).
    /// The link's machine (pure, in Core): the current connection's life, the retries, the
    /// failover and the renewal's decisions (`LinkSupervisor`). Private to this file: the others
    /// read it through the properties below and change it through `input` and the methods here.
    private var supervisor: LinkSupervisor
    private(set) var retryTimer: Scheduled<Void>?
    private let stopped: EventLoopPromise<Void>
    private(set) var phaseSinceWall = WallClock.millisecondsSinceEpoch()
    /// Why the last open link ended (not a later failed attempt): the reconnect's metric label.
    private(set) var lostBecause: DisconnectReason?
    /// How long to wait for the server to end the TCP connection after a close handshake.
    static let closeTimeout: TimeAmount = .seconds(3)

    init(
        configuration: Configuration, networkAvailable: Bool, eventLoop: any EventLoop, logger: Logger, connectors: any UpstreamDialer,
        events: any UpstreamEventSink, metrics: DaemonMetrics = DaemonMetrics(), spool: (Spool, Spool.Restored)? = nil,
        session: UpstreamSession? = nil, connectAttempts: ConnectAttempts? = nil, slot: Int = 0
    ) {
        self.slot = slot
        self.connectAttempts = connectAttempts ?? ConnectAttempts(configuration.upstream.limits.connectAttempts)
        self.metrics = metrics
        self.session = session ?? UpstreamSession(configuration: configuration, eventLoop: eventLoop, logger: logger)
        self.eventLoop = eventLoop
        self.configuration = configuration
        var logger = logger
        logger[metadataKey: "upstream.url"] = "\(configuration.upstream.url)"
        if slot > 0 { logger[metadataKey: "upstream.connection"] = "\(slot + 1)" }
        self.logger = logger
        self.events = events
        self.connectors = connectors
        self.stopped = eventLoop.makePromise()
        self.connection = UpstreamConnection(eventLoop: eventLoop, number: 0)
        self.outbound = OutboundPath(configuration: configuration, spool: spool, eventLoop: eventLoop, metrics: metrics, logger: logger)
        self.supervisor = LinkSupervisor(
            link: Machine(
                settings: Self.machineSettings(configuration),
                networkAvailable: networkAvailable,
                now: MonotonicInstant(nanoseconds: eventLoop.now.uptimeNanoseconds),
                generator: SystemRandomNumberGenerator()
            ))
        if let spool = spool?.0 {
            // Told once per batch; the link lives as long as the daemon's loop.
            let bound = NIOLoopBound(self, eventLoop: eventLoop)
            spool.whenStored { stored in bound.value.spoolStored(stored) }
        }
    }

    /// The loop's clock (an `EmbeddedEventLoop`'s in tests): the machine's, the timers' and the heartbeat's time.
    var now: MonotonicInstant { MonotonicInstant(nanoseconds: self.eventLoop.now.uptimeNanoseconds) }

    // MARK: - Inputs

    var phase: ConnectionPhase { self.supervisor.link.phase }
    // The machine as the link's other files read it (they change it only through `input`). Read
    // here, the machine stays private to this file, so its accesses need no run-time
    // exclusivity check (the message path reads `attemptStep` for every message).
    var attemptStep: Machine.AttemptStep? { self.supervisor.link.attemptStep }
    var isShuttingDown: Bool { self.supervisor.link.isShuttingDown }
    var networkAvailable: Bool { self.supervisor.link.networkAvailable }
    /// No close frame went on the current connection: data, pings and pongs may go.
    var mayWrite: Bool { self.supervisor.link.mayWrite }
    /// The server's close frame on the current connection, once it came.
    var serverClose: (code: UInt16?, reason: String)? { self.supervisor.link.serverClose }
    var retryAt: MonotonicInstant? { self.supervisor.link.retryAt }
    var reconnects: Int { self.supervisor.link.reconnects }
    var failures: Int { self.supervisor.link.failures }
    var lastDisconnect: DisconnectReason? { self.supervisor.link.lastDisconnect }
    var roundTripTime: Duration? { self.supervisor.link.roundTripTime }

    static func machineSettings(_ configuration: Configuration) -> Machine.Settings {
        .init(
            backoff: configuration.backoff.policy, maxAttempts: configuration.backoff.maxAttempts,
            heartbeat: .init(interval: configuration.heartbeat.interval, deadline: configuration.heartbeat.deadline))
    }

    // MARK: - The heartbeat (the machine's, in each connection's context)

    /// Does what a connection's heartbeat asks now (`connection`: the current one when nil, or
    /// a renewal's new one): pings, sets its timer for the next time, or ends a dead connection
    /// (the link's: dropped and reconnected; a renewal's new one: the renewal fails). Nothing
    /// when no heartbeat runs on it.
    func heartbeatTick(on connection: UpstreamConnection? = nil) {
        let connection = connection ?? self.connection
        let current = connection === self.connection
        guard current || connection === self.renewal.successor else { return }
        while let decision = current ? self.supervisor.heartbeat(now: self.now) : self.supervisor.otherHeartbeat(now: self.now) {
            switch decision {
            case .sendPing(let payload):
                self.writePing(payload, on: connection)
            case .wait(let until):
                connection.heartbeat.arm(at: until) { self.heartbeatTick(on: connection) }
                return
            case .dead(let silence) where current:
                // Dead link: no close handshake is possible; drop TCP and reconnect.
                self.drop(because: .heartbeatTimeout(silence: silence), input: "heartbeatTimeout")
                return
            case .dead(let silence):
                self.renewalFailed(connection, "the new connection is dead: \(DisconnectReason.heartbeatTimeout(silence: silence))")
                return
            }
        }
    }

    /// A control frame from the upstream shows the connection is alive.
    func heartbeatReceived() { self.supervisor.received(now: self.now) }

    /// A message from the upstream (the first of a socket read: one is enough): alive, and
    /// heard for the protocol's keepalive.
    func messageReceived() { self.supervisor.receivedMessage(now: self.now) }

    // MARK: - The application protocol's keepalive (the machine's, in the connection's context)

    /// The application protocol's server set a keepalive on this connection.
    func keepalive(_ timing: AppProtocolTiming, protocol name: String) {
        self.supervisor.keepaliveSet(timing, protocol: name, now: self.now)
        self.keepaliveTick()
    }

    /// Does what the protocol's keepalive asks now: sends its text, sets its timer for the next
    /// time, or drops a dead link.
    func keepaliveTick() {
        while let decision = self.supervisor.keepalive(now: self.now) {
            switch decision {
            case .send(let text):
                _ = self.sendAhead(OutboundMessage(.text(text)))
            case .wait(let until):
                self.connection.keepalive.arm(at: until) { self.keepaliveTick() }
                return
            case .dead(let why):
                self.fail(why)
                return
            }
        }
    }

    /// A pong: its round trip, when it answers the last ping.
    func heartbeatPong(payload: UInt64?) -> Duration? { self.supervisor.receivedPong(payload: payload, now: self.now) }

    /// After a suspend/resume or a network change: ping now and start the deadline.
    func checkLiveness(why: String) {
        guard self.supervisor.checkLiveness(now: self.now) else { return }
        self.logger.info("heartbeat: liveness check: \(why)")
        self.heartbeatTick()
    }
    var url: UpstreamURL { self.supervisor.failover.attemptURL ?? self.configuration.upstream.url }
    /// The renewal's decisions (read; changed through the methods of UpstreamLink+Renewal).
    var renewalMachine: RenewalMachine { self.supervisor.renewal }

    func emit(_ event: UpstreamEvent) {
        self.events.upstreamLink(self, emitted: event)
    }

    /// The socket read that brought the last messages is done.
    func emitReadComplete() {
        self.events.upstreamLinkReadComplete(self)
    }
    var stoppedFuture: EventLoopFuture<Void> { self.stopped.futureResult }
    /// `connection` is the current one, and has not ended: its callbacks are the link's.
    func isCurrent(_ connection: UpstreamConnection) -> Bool { connection === self.connection && !connection.ended }

    /// Applies a reloaded configuration to what can change on a live link.
    func update(configuration: Configuration) {
        self.configuration = configuration
        self.supervisor.update(urls: configuration.upstream.urls)
        // A changed upstream.failback_after applies to the link open now.
        if self.supervisor.link.phase == .open { self.scheduleFailback() }
        self.outbound.update(configuration: configuration)
        self.session.update(configuration: configuration)
        self.connectAttempts.update(configuration.upstream.limits.connectAttempts)
        self.supervisor.updateSettings(Self.machineSettings(configuration), now: self.now)
        // A running heartbeat took the new interval: its timer is set again.
        self.heartbeatTick()
    }

    // MARK: - Driving the machine

    /// An input of the current connection's machine (`body`), through the supervisor's rules.
    /// `reason` is read after the machine took the input (it may describe what the machine
    /// recorded). Returns the change of phase it told, if any.
    @discardableResult
    func input(_ name: String, reason: @autoclosure () -> String, _ body: (inout Machine, MonotonicInstant) throws -> Machine.Action) -> Machine.Transition? {
        self.supervise(name, reason: reason()) { supervisor, now in try supervisor.connection { try body(&$0, now) } }
    }

    /// An input of the supervisor (`body`); then what it decided is done, and the change of phase
    /// it told is logged and published.
    @discardableResult
    func supervise(_ name: String, reason: @autoclosure () -> String, _ body: (inout LinkSupervisor, MonotonicInstant) throws -> Machine.Action)
        -> Machine.Transition?
    {
        let action: Machine.Action
        do {
            action = try body(&self.supervisor, self.now)
        } catch {
            let phase = self.supervisor.link.phase.rawValue
            self.logger.error("bug: the state machine refused \(name) in \(phase)", metadata: ["error": "\(error)", "input": "\(name)"])
            return nil
        }
        self.perform(action)
        // The renewal went with the link (closed, lost, stopping): its connections end.
        if self.supervisor.takeRenewalAbandoned() { self.renewal.abandon() }
        guard let transition = self.supervisor.takeTransition() else { return nil }
        let (before, after) = (transition.from, transition.to)
        if let lost = transition.lost { self.lostBecause = lost }
        self.phaseSinceWall = WallClock.millisecondsSinceEpoch()
        var metadata: Logger.Metadata = ["state.from": "\(before.rawValue)", "state.to": "\(after.rawValue)", "reason": "\(reason())"]
        if after == .open, let p = self.connection.subprotocol { metadata["upstream.subprotocol"] = "\(p)" }
        // Retry cycles (connecting <-> backingOff) at debug: each failure is one warning already.
        let cycling = (before == .connecting && after == .backingOff) || (before == .backingOff && after == .connecting)
        self.logger.log(level: cycling ? .debug : .notice, "state \(before.rawValue) -> \(after.rawValue): \(reason())", metadata: metadata)
        self.emit(.state(after, reason: reason(), closedRightAfterOpen: transition.closedRightAfterOpen))
        if after == .stopped { self.stopped.succeed(()) }
        return transition
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
            let connection = self.connection
            self.logger.debug(
                "retrying in \(delay.short) (attempt \(attempt))",
                metadata: ["backoff.delay_ms": "\(delay.nanoseconds / 1_000_000)", "backoff.attempt": "\(attempt)"]
            )
            self.emit(.retryScheduled(attempt: attempt, delay: delay))
            self.retryTimer?.cancel()
            self.retryTimer = self.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(delay.nanoseconds)) {
                guard connection === self.connection else { return }
                self.retryTimer = nil
                self.input("retry", reason: "backoff elapsed") { m, now in try m.retryTimerFired(now: now) }
            }
        case .cancelRetry:
            self.retryTimer?.cancel()
            self.retryTimer = nil
        case .sendClose(let code, let reason):
            self.writeClose(code: code, reason: reason)
        case .abort(let reason):
            self.logger.info("dropping connection: \(reason)")
            self.teardown()
        case .abortAndConnect(let attempt):
            self.teardown()
            self.startAttempt(attempt)
        }
    }

    /// What the link carried: the counters are changed here only.
    func counted(received bytes: Int) { self.traffic.received(bytes: bytes) }
    func counted(sent bytes: Int) { self.traffic.sent(bytes: bytes) }
    /// Messages written after waiting for the pace (`upstream.limits`).
    func counted(paced messages: Int) { self.pacedMessages &+= UInt64(messages) }
    /// The next attempt waits for `connect_attempts` until `instant` (nil: it started).
    func connectWaits(until instant: MonotonicInstant?) { self.connectWaitUntil = instant }

    /// A new connection for attempt `number` (the last one ended).
    func beginAttempt(_ number: Int) -> UpstreamConnection {
        self.connection = UpstreamConnection(eventLoop: self.eventLoop, number: number)
        return self.connection
    }

    /// The current connection failed (`failure`): its first error, and the link's last.
    func failed(_ failure: AttemptFailure) {
        self.connection.failed(failure)
        self.lastFailure = failure
    }

    /// Forgets the current attempt or link: later callbacks from it are ignored. A renewal
    /// under way goes with it.
    func teardown() {
        self.connection.end()
        self.session.ended(slot: self.slot)
        self.renewal.abandon()
    }

    /// The renewal's connection takes over, if the supervisor lets it (restored, the link
    /// open): it becomes the current one, still open (its heartbeat starts again); the old one
    /// is returned, to close, with how long the overlap took.
    func takeOver(_ successor: UpstreamConnection) -> (old: UpstreamConnection, took: Duration)? {
        guard let took = self.supervisor.renewalTookOver(now: self.now, wallMillis: WallClock.millisecondsSinceEpoch()) else { return nil }
        let old = self.connection
        self.connection = successor
        return (old, took)
    }

    // The renewal's and the failover's inputs (the supervisor's), for +Renewal and +Attempts.

    func askRenewal(why: String) -> RenewalMachine.Ask { self.supervisor.askRenewal(why: why) }
    func startRenewal(why: String) -> Bool { self.supervisor.startRenewal(why: why, now: self.now) }
    func renewalReady(sent keys: Set<String>) { self.supervisor.renewalReady(sent: keys) }
    func renewalSent(_ key: String) { self.supervisor.renewalSent(key) }
    func renewalCloseOld(requestsInFlight: Int) -> LinkSupervisor.CloseOld { self.supervisor.renewalCloseOld(requestsInFlight: requestsInFlight) }
    func renewalClosingOld() -> Machine.Action? { self.supervisor.renewalClosingOld() }
    func renewalOldEnded() -> String? { self.supervisor.renewalOldEnded() }
    func renewalFailed(_ why: String, lifetimeSet: Bool, retry: Duration) -> Duration? {
        self.supervisor.renewalFailed(why, wallMillis: WallClock.millisecondsSinceEpoch(), lifetimeSet: lifetimeSet, retry: retry)
    }
    func attemptURL() -> UpstreamURL { self.supervisor.attemptURL(in: self.configuration.upstream.urls) }
    func failback(planned: Bool) -> MonotonicInstant? {
        self.supervisor.failback(after: self.configuration.upstream.failbackAfter, now: self.now, planned: planned)
    }
    func backToPrimary() -> Bool { self.supervisor.backToPrimary() }

    // The renewal's other connection, as the current one's (the supervisor holds its context).

    /// No close frame went on the renewal's other connection.
    var otherMayWrite: Bool { self.supervisor.otherMayWrite }
    func otherUpgraded() { self.supervisor.otherUpgraded(now: self.now) }
    func otherReceived() { self.supervisor.otherReceived(now: self.now) }
    func otherReceivedMessage() { self.supervisor.otherReceivedMessage(now: self.now) }
    func otherPong(payload: UInt64?) -> Duration? { self.supervisor.otherPong(payload: payload, now: self.now) }
    func otherKeepaliveSet(_ timing: AppProtocolTiming, protocol name: String) {
        self.supervisor.otherKeepaliveSet(timing, protocol: name, now: self.now)
    }
    func otherCloseFrameReceived(code: UInt16?, reason: String) -> Machine.Action {
        self.supervisor.otherCloseFrameReceived(code: code, reason: reason)
    }
}

@available(*, unavailable)
extension UpstreamLink: Sendable {}
