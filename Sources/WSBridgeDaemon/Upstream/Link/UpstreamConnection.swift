import NIOCore
import NIOWebSocket
import WSBridgeCore

/// One connection of the link, from its first TCP byte to its end: a new one for every attempt
/// and for a renewal's second connection, never reused. Its channel and what the handshake
/// negotiated, its deadline and close timers, its heartbeat, its pace, its close handshake's
/// frame, the flush of a tick's writes and the clock of the socket read being handled (what its
/// close handshake decides is the link machine's). `end()` ends it for good: its timers stop,
/// its channel closes, and nothing of it reaches the link after (`ended`: its channel's
/// callbacks and its timers check it). The link tells its connections apart by identity (the
/// current one, a renewal's second or old one). Confined to the link's event loop.
final class UpstreamConnection {
    /// `end()` was called: its callbacks and timers are ignored from then on.
    private(set) var ended = false
    private let eventLoop: any EventLoop
    /// The number of its connection attempt, for the log (a renewal's is the current one's).
    let number: Int
    private(set) var channel: (any Channel)?
    /// The connection's frame encoder, which the link's data messages are handed to directly
    /// (`UpstreamFrameEncoder.send`); nil with permessage-deflate.
    private(set) var frames: UpstreamFrameEncoder?
    private(set) var subprotocol: String?
    /// permessage-deflate was negotiated (its handler compresses sends).
    private(set) var compression = false
    /// The first error of this connection: what its end is reported as.
    private(set) var error: String?
    /// `upstream.connect_timeout` until the upgrade, then `upstream.ready_timeout`.
    private var deadline: Scheduled<Void>?
    /// The wait for the server to end TCP after the close handshake.
    private var closeTimer: Scheduled<Void>?
    /// Open on a fallback URL: the return to the primary (`upstream.failback_after`).
    private var failback: Scheduled<Void>?
    /// The wall-clock receive time of the socket read being handled (nil between reads).
    private var readWallMillis: Int64?
    /// A flush of the frames written in this event-loop tick is due (`flushSoon`).
    private var flushScheduled = false
    /// The timer of the open connection's heartbeat (its pings and pong deadline). It stops
    /// with the connection.
    let heartbeat: ConnectionTimer
    /// The timer of the keepalive the application protocol's server set on this connection.
    let keepalive: ConnectionTimer
    /// The connection's pace (`upstream.limits.messages_per_second`), from its upgrade on; nil
    /// when it is not paced.
    private(set) var pacing: PacedWrites?
    /// When the upgrade completed: a connection's lifetime counts from it.
    private(set) var upgradedAt: MonotonicInstant?

    init(eventLoop: any EventLoop, number: Int) {
        self.number = number
        self.eventLoop = eventLoop
        self.heartbeat = ConnectionTimer(eventLoop: eventLoop)
        self.keepalive = ConnectionTimer(eventLoop: eventLoop)
    }

    /// Ends the connection: its timers stop, its channel closes, and its later callbacks are
    /// ignored.
    func end() {
        self.ended = true
        self.heartbeat.stop()
        self.keepalive.stop()
        self.pacing?.end()
        self.pacing = nil
        self.upgradedAt = nil
        self.setDeadline(nil)
        self.closeTimer?.cancel()
        self.closeTimer = nil
        self.setFailback(nil)
        self.channel?.close(promise: nil)
        self.channel = nil
        self.frames = nil
        self.subprotocol = nil
        self.compression = false
    }

    /// The channel of the connection being made (before the upgrade completes).
    func attach(_ channel: any Channel) {
        self.channel = channel
    }

    /// The upgrade completed on `channel`; its writes paced from now when `limits` pace them
    /// (`upstream.limits.messages_per_second`): every connection's pace is made here.
    func upgraded(
        _ channel: any Channel, subprotocol: String?, compression: Bool, limits: Configuration.Upstream.Limits, at now: MonotonicInstant
    ) {
        self.setDeadline(nil)
        self.upgradedAt = now
        self.pacing = limits.messagesPerSecond.map { PacedWrites(perSecond: $0, burst: limits.burst, now: now, eventLoop: self.eventLoop) }
        self.channel = channel
        self.subprotocol = subprotocol
        self.compression = compression
        // Data messages go straight to the frame encoder unless permessage-deflate (nearer the
        // tail) must compress them on the way.
        self.frames = compression ? nil : try? channel.pipeline.syncOperations.handler(type: UpstreamFrameEncoder.self)
    }

    /// Replaces the attempt's deadline (nil: none).
    func setDeadline(_ timer: Scheduled<Void>?) {
        self.deadline?.cancel()
        self.deadline = timer
    }

    /// Replaces the return to the primary (nil: none).
    func setFailback(_ timer: Scheduled<Void>?) {
        self.failback?.cancel()
        self.failback = timer
    }

    func failed(_ failure: AttemptFailure) {
        if self.error == nil { self.error = failure.description }
    }

    /// Waits for the server to end TCP after the close handshake, until `timer` fires.
    /// Our close frame went, and the server's end of TCP (or the close timeout) is awaited.
    var awaitingEnd: Bool { self.closeTimer != nil }

    func awaitEnd(_ timer: Scheduled<Void>) {
        self.closeTimer?.cancel()
        self.closeTimer = timer
    }

    /// Writes our close frame (`code`, `reason` cut to what a control frame holds) and waits
    /// `timeout` for the server to end TCP, then closes it (`late` is told first). Every
    /// connection's close handshake goes through here, the link's and a renewal's old one's.
    func writeClose(code: UInt16, reason: String, timeout: TimeAmount, late: @escaping () -> Void) {
        guard let channel = self.channel else { return }
        var buffer = channel.allocator.buffer(capacity: 2 + reason.utf8.count)
        buffer.writeInteger(code)
        buffer.writeString(String(reason.utf8.prefix(123)) ?? "")
        channel.writeAndFlush(WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: buffer), promise: nil)
        self.awaitEnd(
            self.schedule(in: timeout) {
                late()
                self.channel?.close(promise: nil)
            })
    }

    /// The receive time of the messages of the current socket read, and whether this is the
    /// read's first message (the clocks are read once per read, not per message: a 64 KiB read
    /// can hold hundreds of messages, all received at the same moment).
    func readTime() -> (millis: Int64, first: Bool) {
        if let at = self.readWallMillis { return (at, false) }
        let at = WallClock.millisecondsSinceEpoch()
        self.readWallMillis = at
        return (at, true)
    }

    /// Flushes once the frames of this event-loop tick are written (a client's pipelined
    /// requests are handled in one tick): one flush through the pipeline and one writev for them
    /// all, where a flush per send costs a pass through the pipeline each (docs/performance.md). The flush runs in the same
    /// tick, after the work already queued, on the connection current then.
    func flushSoon(on eventLoop: any EventLoop) {
        guard !self.flushScheduled else { return }
        self.flushScheduled = true
        eventLoop.assumeIsolated().execute {
            self.flushScheduled = false
            self.channel?.flush()
        }
    }

    /// A timer of this connection: `body` runs at `deadline` unless the connection ended first.
    func schedule(at deadline: NIODeadline, _ body: @escaping () -> Void) -> Scheduled<Void> {
        self.eventLoop.assumeIsolated().scheduleTask(deadline: deadline) {
            guard !self.ended else { return }
            body()
        }
    }

    /// A timer of this connection: `body` runs after `delay` unless the connection ended first.
    func schedule(in delay: TimeAmount, _ body: @escaping () -> Void) -> Scheduled<Void> {
        self.eventLoop.assumeIsolated().scheduleTask(in: delay) {
            guard !self.ended else { return }
            body()
        }
    }

    /// The socket read is done: the next read reads the clocks again.
    func readComplete() {
        self.readWallMillis = nil
    }
}

@available(*, unavailable)
extension UpstreamConnection: Sendable {}
