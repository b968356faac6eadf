import NIOCore
import WSBridgeCore

/// The heartbeat of one open connection: its state machine (pings with a payload to measure the
/// round trip, and a pong deadline that declares a silent link dead) and the one timer that wakes
/// it. It writes its pings through `ping` and reports a dead link through `dead`, once; `stop()`
/// ends it, and nothing it was given is called after that. Its clock is its event loop's (an
/// `EmbeddedEventLoop`'s in tests). Confined to that loop.
final class LinkHeartbeat {
    private let eventLoop: any EventLoop
    private var machine: HeartbeatStateMachine?
    private var timer: Scheduled<Void>?
    private var ping: ((UInt64) -> Void)?
    private var dead: ((Duration) -> Void)?

    init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    private var now: MonotonicInstant { MonotonicInstant(nanoseconds: self.eventLoop.now.uptimeNanoseconds) }

    /// Running: started and neither stopped nor dead.
    var isRunning: Bool { self.machine != nil }

    /// The last measured round trip, while running.
    var roundTripTime: Duration? { self.machine?.roundTripTime }

    /// Starts the heartbeat of a connection that opened now: `ping` writes a ping with that
    /// payload (and the application heartbeat, if any); `dead` is told the silence once the
    /// deadline passed with nothing received.
    func start(interval: Duration, deadline: Duration, ping: @escaping (UInt64) -> Void, dead: @escaping (Duration) -> Void) {
        self.stop()
        self.machine = HeartbeatStateMachine(interval: interval, deadline: deadline, now: self.now)
        self.ping = ping
        self.dead = dead
        self.run()
    }

    /// A reload: a running heartbeat takes the new interval and deadline.
    func update(interval: Duration, deadline: Duration) {
        guard self.machine != nil else { return }
        self.machine?.update(interval: interval, deadline: deadline, now: self.now)
        self.run()
    }

    /// Pings now and starts the deadline (a suspend/resume, a network change). False when not running.
    @discardableResult
    func checkNow() -> Bool {
        guard self.machine != nil else { return false }
        self.machine?.checkNow(now: self.now)
        self.run()
        return true
    }

    /// Anything from the upstream shows it is alive.
    func received() {
        self.machine?.received(now: self.now)
    }

    /// A pong: its round trip, when it answers our last ping.
    func receivedPong(payload: UInt64?) -> Duration? {
        self.machine?.receivedPong(payload: payload, now: self.now)
    }

    /// Ends it: no more pings, no verdict.
    func stop() {
        self.timer?.cancel()
        self.timer = nil
        self.machine = nil
        self.ping = nil
        self.dead = nil
    }

    private func run() {
        guard var machine = self.machine else { return }
        self.timer?.cancel()
        self.timer = nil
        let now = self.now
        while true {
            switch machine.next(now: now) {
            case .sendPing(let payload):
                self.ping?(payload)
            case .wait(let until):
                self.machine = machine
                self.timer = self.eventLoop.assumeIsolated().scheduleTask(deadline: NIODeadline.uptimeNanoseconds(until.nanoseconds)) {
                    self.timer = nil
                    self.run()
                }
                return
            case .dead(let silence):
                let dead = self.dead
                self.stop()
                dead?(silence)
                return
            }
        }
    }
}

@available(*, unavailable)
extension LinkHeartbeat: Sendable {}
