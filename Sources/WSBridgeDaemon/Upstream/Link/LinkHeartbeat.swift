import NIOCore
import WSBridgeCore

/// The one timer of a connection's heartbeat. The heartbeat itself (pings, the round trip, the
/// pong deadline) is the connection machine's, nested in the connection's context; this timer
/// wakes the link at the instant it asks for (`UpstreamLink.heartbeatTick`). It belongs to the
/// connection (`LinkAttempt`) and stops with it: nothing of an older connection fires. Its clock
/// is its event loop's (an `EmbeddedEventLoop`'s in tests). Confined to that loop.
final class LinkHeartbeat {
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
extension LinkHeartbeat: Sendable {}
