import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// The snapshot `status` reports: the link is the one source of truth for its part; the plane
/// adds its own counters (subscribers, clients, seq, drops).
extension UpstreamLink {
    var status: StatusReport {
        var report = StatusReport()
        report.state = self.machine.phase
        report.since = self.phaseSinceWall
        report.url = "\(self.url)"
        report.reconnects = self.machine.reconnects
        report.failedAttempts = self.machine.failures
        report.rttMs = self.heartbeat.roundTripTime.map { Double($0.nanoseconds) / 1e6 }
        report.subprotocol = self.attempt.subprotocol
        report.compression = self.attempt.compression
        report.messagesIn = self.counters.messagesIn
        report.bytesIn = self.counters.bytesIn
        report.messagesOut = self.counters.messagesOut
        report.bytesOut = self.counters.bytesOut
        report.queue = self.outbound.status(fsync: self.configuration.queue.fsync)
        let ready = self.machine.attemptStep == .awaitingReady ? "waiting" : self.machine.phase == .open ? "ready" : "down"
        report.session = self.session.status(ready: ready)
        report.lastError = self.attempt.lastFailure?.description
        report.lastErrorReason = self.attempt.lastFailure?.kind.rawValue
        // The last link that was open and ended; failed attempts show in last_error instead.
        report.lastClose = self.lostBecause?.close
        if let at = self.machine.retryAt {
            report.retryInMs = max(0, (at - Self.now()).nanoseconds / 1_000_000)
        }
        return report
    }
}
