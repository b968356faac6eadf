import NIOCore
import NIOWebSocket
import WSBridgeCore
import WSBridgeProtocol

/// A connection's pace (`upstream.limits.messages_per_second`, docs/limits.md): its token bucket,
/// and the link's own frames (opening messages, sticky re-sends, the protocol's keepalive text;
/// pings and pongs when they count) waiting their turn. They go ahead of apps' sends, which wait
/// in the send queue and are written as the bucket allows once none of these waits. It belongs
/// to the connection (made at the upgrade, gone with it: what waited is the session's, sent
/// again on the next open); its timer wakes the link when the next message may go. Confined to
/// the link's event loop.
final class PacedWrites {
    private var pacer: SendPacer
    /// The link's own frames waiting, in the order they go.
    private var own = CircularBuffer<WebSocketFrame>()
    /// Since when the pace holds a message back (nil: nothing waits for it).
    private(set) var waitingSince: MonotonicInstant?
    /// The send queue's first message waits for the pace (the last one offered did not go).
    private(set) var queueHeld = false
    /// Wakes the link when the next message may go; stops with the connection.
    let timer: ConnectionTimer

    init(perSecond: Double, burst: Int, now: MonotonicInstant, eventLoop: any EventLoop) {
        self.pacer = SendPacer(perSecond: perSecond, burst: burst, now: now)
        self.timer = ConnectionTimer(eventLoop: eventLoop)
    }

    /// The link's own frames waiting now.
    var waiting: Int { self.own.count }

    /// Whether a message from the send queue may go at `now` (it takes its place in the bucket):
    /// none of the link's own waits ahead of it and the bucket has room. When not, the wait is
    /// noted.
    func mayWriteQueued(now: MonotonicInstant) -> Bool {
        self.queueHeld = !(self.own.isEmpty && self.pacer.take(now: now))
        if self.queueHeld { self.held(now) }
        return !self.queueHeld
    }

    /// A frame of the link's own: returned when it may go now, else kept in its turn (`first`: a
    /// ping or pong, which goes before the link's other waiting frames, so that a long restore
    /// cannot hold the heartbeat past its deadline).
    func own(_ frame: WebSocketFrame, first: Bool = false, now: MonotonicInstant) -> WebSocketFrame? {
        if self.own.isEmpty, self.pacer.take(now: now) { return frame }
        // One ping and one pong wait at most: a newer one takes the older's place (the heartbeat
        // waits for the last ping's pong; a pong answers the last ping, RFC 6455 §5.5.3), so a
        // rate below the heartbeat's cannot grow the lane.
        if frame.opcode == .ping || frame.opcode == .pong, let older = self.own.firstIndex(where: { $0.opcode == frame.opcode }) {
            self.own[older] = frame
            return nil
        }
        if first { self.own.prepend(frame) } else { self.own.append(frame) }
        self.held(now)
        return nil
    }

    /// The link's own frames that may go at `now`, in order (each takes its place in the bucket).
    func due(now: MonotonicInstant) -> [WebSocketFrame] {
        var frames: [WebSocketFrame] = []
        while !self.own.isEmpty, self.pacer.take(now: now) { frames.append(self.own.removeFirst()) }
        return frames
    }

    /// When the next message may go.
    func next(now: MonotonicInstant) -> MonotonicInstant { self.pacer.next(now: now) }

    /// Whether anything waits for the pace (the link's own frames, or the send queue): when
    /// nothing does, the wait is over.
    func settle() -> Bool {
        if self.own.isEmpty && !self.queueHeld { self.waitingSince = nil }
        return self.waitingSince != nil
    }

    private func held(_ now: MonotonicInstant) {
        if self.waitingSince == nil { self.waitingSince = now }
    }

    /// The connection ended: its timer stops and what waited goes (the session sends it again).
    func end() {
        self.timer.stop()
        self.own.removeAll()
        self.waitingSince = nil
        self.queueHeld = false
    }
}

/// `upstream.limits.connect_attempts`: no more connection attempts than the limit in any window,
/// across every connection of the daemon. One per daemon, shared by its connections. Confined
/// to the daemon's event loop.
final class ConnectAttempts {
    private(set) var limit: Configuration.Upstream.Limits.AttemptLimit?
    private var window: AttemptWindow?

    init(_ limit: Configuration.Upstream.Limits.AttemptLimit?) {
        self.update(limit)
    }

    /// A reload: a changed limit starts a window of its own.
    func update(_ limit: Configuration.Upstream.Limits.AttemptLimit?) {
        guard limit != self.limit else { return }
        self.limit = limit
        self.window = limit.map { AttemptWindow(limit: $0.limit, window: $0.window) }
    }

    /// An attempt starts at `now` (nil), or may start only at the instant returned.
    func admit(now: MonotonicInstant) -> MonotonicInstant? {
        guard var window = self.window else { return nil }
        defer { self.window = window }
        return window.admit(now: now) ? nil : window.next(now: now)
    }

    /// Attempts in the window at `now` (nil: no limit).
    func count(now: MonotonicInstant) -> Int? {
        guard var window = self.window else { return nil }
        defer { self.window = window }
        return window.count(now: now)
    }
}

@available(*, unavailable)
extension PacedWrites: Sendable {}

@available(*, unavailable)
extension ConnectAttempts: Sendable {}

extension UpstreamLink {
    /// `status`'s `limits`: the pace and the attempts' window, when set.
    var limitsStatus: StatusReport.Limits? {
        let limits = self.configuration.upstream.limits
        guard limits.messagesPerSecond != nil || self.connectAttempts.limit != nil else { return nil }
        let now = self.now
        let pacing = self.connection.pacing
        let waiting = self.connectWaitUntil.flatMap { $0 > now && self.phase == .connecting ? $0 : nil }
        return StatusReport.Limits(
            messagesPerSecond: limits.messagesPerSecond, burst: limits.messagesPerSecond == nil ? nil : limits.burst,
            countPings: limits.countPings, waiting: pacing?.waiting ?? 0,
            waitMs: pacing?.waitingSince.map { (now - $0).nanoseconds / 1_000_000 }, paced: self.pacedMessages,
            connectAttempts: self.connectAttempts.limit.map { "\($0)" }, attemptsInWindow: self.connectAttempts.count(now: now),
            connectWaitMs: waiting.map { ($0 - now).nanoseconds / 1_000_000 })
    }
}
