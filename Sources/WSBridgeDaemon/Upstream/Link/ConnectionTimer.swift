import NIOCore
import WSBridgeCore

/// One timer of a connection: its heartbeat's or its protocol keepalive's. What they decide
/// (pings, the round trip, deadlines) is the connection machine's, nested in the connection's
/// context; a timer wakes the link at the instant they ask for (`UpstreamLink.heartbeatTick`,
/// `keepaliveTick`). It belongs to the connection (`UpstreamConnection`) and stops with it: nothing of
/// an older connection fires. Its clock is its event loop's (an `EmbeddedEventLoop`'s in tests).
/// Confined to that loop.
final class ConnectionTimer {
    private let eventLoop: any EventLoop
    private var timer: Scheduled<Void>?

    init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    /// Calls `fire` at `instant` (on the loop's clock), in place of any earlier one.
    func arm(at instant: MonotonicInstant, _ fire: @escaping () -> Void) {
        self.timer?.cancel()
        self.timer = self.eventLoop.assumeIsolated().scheduleTask(deadline: NIODeadline.uptimeNanoseconds(instant.nanoseconds)) {
            self.timer = nil
            fire()
        }
    }

    /// Disarms it.
    func stop() {
        self.timer?.cancel()
        self.timer = nil
    }
}

@available(*, unavailable)
extension ConnectionTimer: Sendable {}
