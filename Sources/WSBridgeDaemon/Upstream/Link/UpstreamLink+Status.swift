import WSBridgeCore
import WSBridgeProtocol

// MARK: - Status

/// The snapshot `status` reports: the link is the one source of truth for its part; the plane
/// adds its own counters (subscribers, clients, seq, drops).
extension UpstreamLink {
    var status: StatusReport {
        var report = StatusReport()
        report.state = self.phase
        report.since = self.phaseSinceWall
        report.url = "\(self.url)"
        report.reconnects = self.reconnects
        report.failedAttempts = self.failures
        report.rttMs = self.roundTripTime.map { Double($0.nanoseconds) / 1e6 }
        report.subprotocol = self.connection.subprotocol
        report.compression = self.connection.compression
        report.traffic = self.traffic
        report.queue = self.outbound.status(fsync: self.configuration.queue.fsync)
        report.limits = self.limitsStatus
        report.renewal = self.renewalStatus
        let ready = self.attemptStep == .awaitingReady ? "waiting" : self.phase == .open ? "ready" : "down"
        report.session = self.session.status(ready: ready)
        report.lastError = self.lastFailure?.description
        report.lastErrorReason = self.lastFailure?.kind.rawValue
        // The last link that was open and ended; failed attempts show in last_error instead.
        report.lastClose = self.lostBecause?.close
        if let at = self.retryAt {
            report.retryInMs = max(0, (at - self.now).nanoseconds / 1_000_000)
        }
        return report
    }
}
