import Logging
import NIOCore
import NIOWebSocket
import WSBridgeCore

/// The heartbeat of an open link: its state machine (pings with a payload to measure the round
/// trip, and a pong deadline that declares a silent link dead) and the timer that wakes it.
/// Confined to the link's event loop.
final class LinkHeartbeat {
    fileprivate var machine: HeartbeatStateMachine?
    fileprivate var timer: Scheduled<Void>?

    var roundTripTime: Duration? { self.machine?.roundTripTime }

    /// Anything from the upstream shows it is alive.
    func received(now: MonotonicInstant) {
        self.machine?.received(now: now)
    }

    /// A pong: its round trip, when it answers our last ping.
    func receivedPong(payload: UInt64?, now: MonotonicInstant) -> Duration? {
        self.machine?.receivedPong(payload: payload, now: now)
    }

    func stop() {
        self.timer?.cancel()
        self.timer = nil
        self.machine = nil
    }
}

extension UpstreamLink {
    /// The link opened: the heartbeat starts.
    func startHeartbeat(generation: Int) {
        self.heartbeat.machine = HeartbeatStateMachine(
            interval: self.configuration.heartbeat.interval,
            deadline: self.configuration.heartbeat.deadline,
            now: Self.now()
        )
        self.runHeartbeat(generation: generation)
    }

    /// A reload: a running heartbeat takes the new interval and deadline.
    func updateHeartbeat() {
        guard self.heartbeat.machine != nil else { return }
        self.heartbeat.machine?.update(interval: self.configuration.heartbeat.interval, deadline: self.configuration.heartbeat.deadline, now: Self.now())
        self.runHeartbeat(generation: self.attempt.generation)
    }

    /// After a suspend/resume or a network change: ping now and start the deadline.
    func checkLiveness(why: String) {
        guard self.heartbeat.machine != nil else { return }
        self.logger.info("heartbeat: liveness check: \(why)")
        self.heartbeat.machine?.checkNow(now: Self.now())
        self.runHeartbeat(generation: self.attempt.generation)
    }

    private func runHeartbeat(generation: Int) {
        guard self.attempt.isCurrent(generation), var machine = self.heartbeat.machine else { return }
        self.heartbeat.timer?.cancel()
        self.heartbeat.timer = nil
        let now = Self.now()
        var silence = Duration.zero
        loop: while true {
            switch machine.next(now: now) {
            case .sendPing(let payload):
                if let channel = self.attempt.channel {
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
                self.heartbeat.machine = machine
                self.heartbeat.timer = self.eventLoop.assumeIsolated().scheduleTask(
                    deadline: NIODeadline.uptimeNanoseconds(until.nanoseconds)
                ) {
                    self.heartbeat.timer = nil
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
        self.attempt.failed(AttemptFailure(description: reason.description))
        self.logger.warning("upstream dead: \(reason)")
        self.teardown()
        self.input("heartbeatTimeout", reason: reason.description) { m, now in try m.disconnected(reason, now: now) }
    }
}
