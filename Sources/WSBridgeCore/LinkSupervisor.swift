import WSBridgeProtocol

/// The link as one pure machine (docs/design.md, "The link"): its current connection's life and
/// the retries between connections (`LinkStateMachine`: the close handshake, heartbeat and
/// protocol keepalive of the connection, backoff, `backoff.max_attempts`, reachability), which
/// URL an attempt uses and when the link goes back to the primary (`Failover`), and a renewal: a
/// second connection opened beside the current one, which takes over once it has caught up
/// (`RenewalMachine`).
///
/// It keeps the rules between them, which the driver used to keep by hand:
/// - a failed attempt moves the next one to the next URL;
/// - a renewal starts only on an open link that is not stopping;
/// - a takeover is the open link's: the new connection is current, still open (not a reconnect),
///   its heartbeat from now, and the return to the primary planned when the link opened stays;
/// - a link that is no longer open (closed, lost, stopping) takes its renewal with it (the
///   driver ends the renewal's connections: `takeRenewalAbandoned`).
///
/// Pure: no clock, no I/O; time and randomness are injected (the backoff's generator is the
/// connection machine's). Every input is a `mutating func` that returns what the driver does.
package struct LinkSupervisor: Sendable {
    /// The current connection and the retries between connections. Inputs that may change the
    /// phase go through `connection(_:)`.
    package private(set) var link: LinkStateMachine
    /// Which URL, and when back to the primary.
    package private(set) var failover = Failover()
    /// The renewal under way, if any, and the renewals' counts.
    package private(set) var renewal = RenewalMachine()
    /// The renewal's other connection, as the current one's in the connection's machine: the new
    /// one from the renewal's start until it takes over (its heartbeat from its upgrade), then
    /// the old one until it ended (its close handshake). The same context moves into the link at
    /// the takeover, and the old one's out of it.
    private(set) var other: ConnectionContext?
    /// The renewal under way went with the link since the driver last asked.
    private var renewalAbandoned = false

    package init(link: LinkStateMachine) {
        self.link = link
    }

    // MARK: - The current connection

    /// An input of the current connection's machine (`body`): after it, a link that is no
    /// longer open takes its renewal with it.
    package mutating func connection(_ body: (inout LinkStateMachine) throws -> LinkStateMachine.Action) rethrows -> LinkStateMachine.Action {
        let action = try body(&self.link)
        if self.link.phase != .open || self.link.isShuttingDown { self.abandonRenewal() }
        return action
    }

    /// Whether a renewal went with the link since the last call: its connections are to end.
    package mutating func takeRenewalAbandoned() -> Bool {
        defer { self.renewalAbandoned = false }
        return self.renewalAbandoned
    }

    private mutating func abandonRenewal() {
        guard self.renewal.phase != .idle || self.renewal.waiting != nil else { return }
        self.renewal.abandon()
        self.other = nil
        self.renewalAbandoned = true
    }

    // The connection's inputs that never change the phase (the heartbeat, the protocol's
    // keepalive, a reload's settings): straight to it. Some run for every socket read.

    package mutating func received(now: MonotonicInstant) { self.link.received(now: now) }
    package mutating func receivedMessage(now: MonotonicInstant) { self.link.receivedMessage(now: now) }
    package mutating func receivedPong(payload: UInt64?, now: MonotonicInstant) -> Duration? { self.link.receivedPong(payload: payload, now: now) }
    package mutating func checkLiveness(now: MonotonicInstant) -> Bool { self.link.checkLiveness(now: now) }
    package mutating func heartbeat(now: MonotonicInstant) -> HeartbeatStateMachine.Decision? { self.link.heartbeat(now: now) }
    package mutating func keepaliveSet(_ timing: AppProtocolTiming, protocol name: String, now: MonotonicInstant) {
        self.link.keepaliveSet(timing, protocol: name, now: now)
    }
    package mutating func keepalive(now: MonotonicInstant) -> ProtocolKeepalive.Decision? { self.link.keepalive(now: now) }
    package mutating func updateSettings(_ settings: LinkStateMachine.Settings, now: MonotonicInstant) {
        self.link.updateSettings(settings, now: now)
        guard let heartbeat = settings.heartbeat else { return }
        self.other?.heartbeat?.update(interval: heartbeat.interval, deadline: heartbeat.deadline, now: now)
    }
    package mutating func takeTransition() -> LinkStateMachine.Transition? { self.link.takeTransition() }

    // MARK: - Failover

    /// The URL the next attempt uses (`urls`: `upstream.urls`, the primary first).
    package mutating func attemptURL(in urls: [UpstreamURL]) -> UpstreamURL { self.failover.urlForAttempt(in: urls) }

    /// The attempt failed (`reason`): the machine's retry (backoff, the network, or giving up),
    /// and with fallbacks the URL the next attempt uses.
    package mutating func connectFailed(
        _ reason: DisconnectReason, urls: [UpstreamURL], now: MonotonicInstant
    ) throws(LinkStateMachine.InvalidTransition) -> (LinkStateMachine.Action, next: UpstreamURL?) {
        let action = try self.link.connectFailed(reason, now: now)
        self.abandonRenewal()
        return (action, self.failover.attemptFailed(urls: urls))
    }

    /// The link opened (or a reload changed `upstream.failback_after`, `after`): on a fallback,
    /// when it goes back to the primary. `planned`: a renewed connection's, the time planned
    /// when the link opened there (not counted again).
    package mutating func failback(after: Duration?, now: MonotonicInstant, planned: Bool = false) -> MonotonicInstant? {
        planned ? self.failover.failbackAt : self.failover.planFailback(after: after, now: now)
    }

    /// The return to the primary is due: true when the link is open on a fallback (the driver
    /// reconnects, to the primary).
    package mutating func backToPrimary() -> Bool {
        guard self.link.phase == .open, !self.link.isShuttingDown, self.failover.onFallback else { return false }
        self.failover.backToPrimary()
        return true
    }

    /// A reload changed `upstream.urls`.
    package mutating func update(urls: [UpstreamURL]) { self.failover.update(urls: urls) }

    // MARK: - Renewal

    /// A renewal is asked for (`why`): ignored unless the link is open and not stopping.
    package mutating func askRenewal(why: String) -> RenewalMachine.Ask {
        self.renewal.ask(why: why, linkOpen: self.link.phase == .open && !self.link.isShuttingDown)
    }

    /// The second connection's attempt starts: false (nothing changed) unless it may.
    package mutating func startRenewal(why: String, now: MonotonicInstant) -> Bool {
        guard self.link.phase == .open, !self.link.isShuttingDown, self.renewal.start(why: why, now: now) else { return false }
        self.other = ConnectionContext()
        return true
    }

    /// The second connection's session is restored; `keys`: the sticky keys sent on it.
    package mutating func renewalReady(sent keys: Set<String>) { _ = self.renewal.ready(sent: keys) }

    /// Sticky key `key` went on the restored second connection too.
    package mutating func renewalSent(_ key: String) { self.renewal.sent(key) }

    /// The restored second connection takes over: it is the link's current one, still open, with
    /// its own context (its heartbeat running since its upgrade); the old one's is the other
    /// (its close handshake; no heartbeat or keepalive: it closes). Returns how long the overlap
    /// took. Nil (nothing changed) unless it was restored and the link is open.
    package mutating func renewalTookOver(now: MonotonicInstant, wallMillis: Int64) -> Duration? {
        guard self.link.phase == .open, !self.link.isShuttingDown, self.renewal.successorReady, let next = self.other,
            var old = try? self.link.renewed(to: next, now: now)
        else { return nil }
        (old.heartbeat, old.keepalive) = (nil, nil)
        self.other = old
        return self.renewal.tookOver(now: now, wallMillis: wallMillis)
    }

    package enum CloseOld: Equatable, Sendable {
        /// No old connection to close, or a close frame went on it already (ours, or the
        /// server's: then only its TCP end is left).
        case ignored
        /// Our close frame goes now.
        case now
        /// Requests sent on it wait for their answers: it closes when they came, or at
        /// `upstream.renew_timeout` whatever waits.
        case whenAnswered
    }

    /// Whether the old connection closes now (`requestsInFlight`: requests sent on it not yet
    /// answered). Asked after the takeover and after each answer. Its close handshake is its
    /// context's, as any connection's: the one record of which close frames went.
    package func renewalCloseOld(requestsInFlight: Int) -> CloseOld {
        guard case .retiring = self.renewal.phase, self.otherMayWrite else { return .ignored }
        return requestsInFlight > 0 ? .whenAnswered : .now
    }

    /// The old connection closes (1000 "renewed"): what to send on it (`.sendClose`); nil when a
    /// close frame went on it already (or there is none).
    package mutating func renewalClosingOld() -> LinkStateMachine.Action? {
        guard case .retiring = self.renewal.phase, var old = self.other, old.close.mayWrite else { return nil }
        let close = old.close.close(code: 1000, reason: "renewed")
        self.other = old
        return LinkStateMachine.action(close)
    }

    /// The old connection ended: why a renewal asked for meanwhile was (it starts now), if one was.
    package mutating func renewalOldEnded() -> String? {
        guard case .retiring = self.renewal.phase else { return nil }
        self.other = nil
        return self.renewal.oldEnded()
    }

    /// The second connection failed before it took over (`why`); when a lifetime's renewal is
    /// tried again (`RenewalMachine.failed`).
    package mutating func renewalFailed(_ why: String, wallMillis: Int64, lifetimeSet: Bool, retry: Duration) -> Duration? {
        guard self.renewal.isOpening else { return nil }
        self.other = nil
        return self.renewal.failed(why, wallMillis: wallMillis, lifetimeSet: lifetimeSet, retry: retry)
    }

    // MARK: - The renewal's other connection (as the current one's inputs)

    /// No close frame went on the other connection: data, pings and pongs may go on it.
    package var otherMayWrite: Bool { self.other?.close.mayWrite ?? false }

    /// The new connection upgraded: its heartbeat starts (its pings and deadline, as any open
    /// connection's), and goes on when it takes over.
    package mutating func otherUpgraded(now: MonotonicInstant) {
        guard self.renewal.isOpening else { return }
        self.other?.startHeartbeat(self.link.settings.heartbeat, now: now)
    }

    /// Anything came on the other connection: it is alive.
    package mutating func otherReceived(now: MonotonicInstant) { self.other?.heartbeat?.received(now: now) }

    /// A message came on the other connection: alive, and heard for its protocol's keepalive.
    package mutating func otherReceivedMessage(now: MonotonicInstant) {
        self.other?.heartbeat?.received(now: now)
        self.other?.keepalive?.heardFrom()
    }

    /// A pong on the other connection: its round trip, when it answers its last ping.
    package mutating func otherPong(payload: UInt64?, now: MonotonicInstant) -> Duration? {
        self.other?.heartbeat?.receivedPong(payload: payload, now: now) ?? nil
    }

    /// What the other connection's heartbeat does at `now` (nil: none runs).
    package mutating func otherHeartbeat(now: MonotonicInstant) -> HeartbeatStateMachine.Decision? {
        self.other?.heartbeat?.next(now: now) ?? nil
    }

    /// The protocol's server set a keepalive on the new connection: it runs once it took over.
    package mutating func otherKeepaliveSet(_ timing: AppProtocolTiming, protocol name: String, now: MonotonicInstant) {
        guard self.renewal.isOpening else { return }
        self.other?.keepalive = ProtocolKeepalive(timing, name: name, now: now)
    }

    /// The server's close frame on the other connection: ours echoes it unless it went first.
    package mutating func otherCloseFrameReceived(code: UInt16?, reason: String) -> LinkStateMachine.Action {
        guard var other = self.other else { return .none }
        let close = other.close.received(code: code, reason: reason)
        self.other = other
        return LinkStateMachine.action(close)
    }
}
