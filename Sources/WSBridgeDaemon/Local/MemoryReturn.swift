import CWSBridgeLinux
import Logging
import NIOCore

/// Gives memory back to the kernel once every lagging subscriber caught up.
///
/// A subscriber that falls behind holds up to its queue's bounds (`local.subscriber_queue`,
/// `local.subscriber_queue_bytes`) of lines; a hundred of them lagging at once hold tens of MiB.
/// When they catch up that memory is free, but glibc keeps free pages that are not at the top of
/// a heap, so the daemon's RSS would stay at the lag's peak. A client that dropped messages
/// counts as lagging until its queue is empty (or it leaves); when the last one is done, the
/// daemon calls `malloc_trim(0)`, at most once a second. Confined to the plane's event loop.
final class MemoryReturn {
    private let eventLoop: any EventLoop
    private let logger: Logger
    /// Clients that dropped messages and whose queue has not emptied since.
    private(set) var laggards = 0
    /// Times memory was given back since the daemon started.
    private(set) var returns: UInt64 = 0
    private var last: NIODeadline?
    private var scheduled = false
    /// The least time between two trims (each walks every arena under its lock).
    static let interval = TimeAmount.seconds(1)

    init(eventLoop: any EventLoop, logger: Logger) {
        self.eventLoop = eventLoop
        self.logger = logger
    }

    /// A client dropped messages (its queue hit a bound).
    func lagBegan() {
        self.laggards += 1
    }

    /// That client's queue emptied, or it left.
    func lagEnded() {
        self.laggards -= 1
        guard self.laggards == 0, !self.scheduled else { return }
        guard let last = self.last, case let due = last + Self.interval, self.eventLoop.now < due else {
            self.trim()
            return
        }
        self.scheduled = true
        self.eventLoop.assumeIsolated().scheduleTask(deadline: due) {
            self.scheduled = false
            if self.laggards == 0 { self.trim() }
        }
    }

    private func trim() {
        let released = cwsb_malloc_trim() == 1
        self.last = self.eventLoop.now
        self.returns &+= 1
        self.logger.debug("lagging subscribers caught up: free memory given back to the kernel", metadata: ["released": "\(released)"])
    }
}

@available(*, unavailable)
extension MemoryReturn: Sendable {}
