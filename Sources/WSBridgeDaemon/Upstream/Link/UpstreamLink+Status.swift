import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// The snapshot `status` reports: the link is the one source of truth for its part; the plane
/// adds its own counters (subscribers, clients, seq, drops).
extension UpstreamLink {
    var status: StatusReport {
        // The last link that was open and ended; failed attempts show in last_error instead.
        let close: StatusReport.Close? = self.lostBecause.map { reason in
            switch reason {
            case .serverClosed(let code, let r): StatusReport.Close(code: code, reason: r, by: "server")
            case .userClosed(let code, let r): StatusReport.Close(code: code, reason: r, by: "user")
            case .daemonStopped: StatusReport.Close(code: 1001, reason: "wsbridged is stopping", by: "daemon")
            case .error(let e): StatusReport.Close(code: nil, reason: e, by: "error")
            case .heartbeatTimeout, .networkLost: StatusReport.Close(code: nil, reason: reason.description, by: "error")
            }
        }
        var retryIn: Int64?
        if let at = self.machine.retryAt {
            retryIn = max(0, (at - Self.now()).nanoseconds / 1_000_000)
        }
        return StatusReport(
            state: self.machine.phase,
            since: self.phaseSinceWall,
            url: "\(self.url)",
            reconnects: self.machine.reconnects,
            failedAttempts: self.machine.failures,
            rttMillis: self.heartbeat.roundTripTime.map { Double($0.nanoseconds) / 1e6 },
            subprotocol: self.attempt.subprotocol,
            compression: self.attempt.compression,
            messagesIn: self.counters.messagesIn,
            bytesIn: self.counters.bytesIn,
            messagesOut: self.counters.messagesOut,
            bytesOut: self.counters.bytesOut,
            subscribers: 0,
            clients: 0,
            seq: 0,
            drops: 0,
            queue: self.outbound.status(fsync: self.configuration.queue.fsync),
            session: self.session.status(open: self.machine.phase == .open),
            lastError: self.attempt.lastFailure?.description,
            lastErrorReason: self.attempt.lastFailure?.kind.rawValue,
            lastClose: close,
            retryInMillis: retryIn
        )
    }
}
