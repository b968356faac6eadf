import Logging
import NIOCore
import NIOWebSocket
import WSBridgeCore

/// The heartbeat: pings with a payload to measure the round trip, and a pong deadline that
/// declares a silent link dead.
extension UpstreamLink {
    // MARK: - Heartbeat

    /// After a suspend/resume or a network change: ping now and start the deadline.
    func checkLiveness(why: String) {
        guard self.heartbeat != nil else { return }
        self.logger.info("heartbeat: liveness check: \(why)")
        self.heartbeat?.checkNow(now: Self.now())
        self.runHeartbeat(generation: self.generation)
    }

    func runHeartbeat(generation: Int) {
        guard generation == self.generation, var heartbeat = self.heartbeat else { return }
        self.heartbeatTimer?.cancel()
        self.heartbeatTimer = nil
        let now = Self.now()
        var silence = Duration.zero
        loop: while true {
            switch heartbeat.next(now: now) {
            case .sendPing(let payload):
                if let channel = self.channel {
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
                self.heartbeat = heartbeat
                self.heartbeatTimer = self.eventLoop.assumeIsolated().scheduleTask(
                    deadline: NIODeadline.uptimeNanoseconds(until.nanoseconds)
                ) {
                    self.heartbeatTimer = nil
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
        self.lastError = AttemptFailure(description: reason.description)
        self.logger.warning("upstream dead: \(reason)")
        self.teardown()
        self.input("heartbeatTimeout", reason: reason.description) { m, now in try m.disconnected(reason, now: now) }
    }
}
