import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

// MARK: - Control

/// What the plane and the link's own parts ask of it (connect, reconnect, close, a failure, a
/// dead link, shutdown, the network), each an input of its machine.
extension UpstreamLink {
    func connect() {
        self.input("connect", reason: "connect requested") { m, now in try m.connectRequested(now: now) }
    }

    func reconnect() {
        self.input("reconnect", reason: "reconnect requested") { m, now in try m.reconnectRequested(now: now) }
    }

    func close(code: UInt16, reason: String) {
        self.input("close", reason: "close requested (code \(code))") { m, now in m.userClose(code: code, reason: reason, now: now) }
    }

    func fail(_ description: String) {
        if self.phase == .connecting {
            self.attemptFailed(self.connection, description)
            return
        }
        guard self.phase == .open, self.connection.channel != nil else { return }
        self.drop(because: .error(description), input: "protocolFailure")
    }

    /// The open link is dead (the heartbeat's deadline passed, the protocol's keepalive went
    /// unanswered): no close handshake is possible; TCP is dropped and the machine told.
    func drop(because reason: DisconnectReason, input: String) {
        self.failed(AttemptFailure(description: reason.description))
        self.logger.warning("upstream dead: \(reason)")
        self.teardown()
        self.input(input, reason: reason.description) { m, now in try m.disconnected(reason, now: now) }
    }

    func shutdown() -> EventLoopFuture<Void> {
        self.input("shutdown", reason: "daemon stopping") { m, now in m.shutdown(now: now) }
        return self.stoppedFuture
    }

    func networkChanged(available: Bool) {
        guard available != self.networkAvailable else { return }
        self.logger.info(available ? "network: route to upstream available" : "network: no route to upstream")
        let reason = available ? "network available" : "network lost: no route to the upstream host"
        self.input("network", reason: reason) { m, now in m.networkChanged(available: available, now: now) }
    }
}
