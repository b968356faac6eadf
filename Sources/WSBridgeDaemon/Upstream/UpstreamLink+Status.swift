import Logging
import NIOCore
import WSBridgeCore

/// The snapshot `status` reports: the link is the one source of truth for it.
extension UpstreamLink {
    var status: LinkStatus {
        let close: (UInt16?, String, String)? = self.machine.lastDisconnect.map { reason in
            switch reason {
            case .serverClosed(let code, let r): (code, r, "server")
            case .userClosed(let code, let r): (code, r, "user")
            case .error(let e): (nil, e, "error")
            case .heartbeatTimeout: (nil, reason.description, "error")
            case .networkLost: (nil, reason.description, "error")
            }
        }
        var retryIn: Int64?
        if let at = self.machine.retryAt {
            retryIn = max(0, (at - Self.now()).nanoseconds / 1_000_000)
        }
        return LinkStatus(
            phase: self.machine.phase.rawValue,
            sinceMillis: self.phaseSinceWall,
            url: "\(self.url)",
            lastClose: close,
            lastError: self.lastError,
            reconnects: self.machine.reconnects,
            failures: self.machine.failures,
            rttMillis: self.heartbeat?.roundTripTime.map { Double($0.nanoseconds) / 1e6 },
            subprotocol: self.subprotocol,
            compression: self.compression,
            messagesIn: self.messagesIn,
            bytesIn: self.bytesIn,
            messagesOut: self.messagesOut,
            bytesOut: self.bytesOut,
            queuedMessages: self.outbound.count,
            queuedBytes: self.outbound.bytes,
            queueMaxMessages: self.outbound.maxMessages,
            queueMaxBytes: self.outbound.maxBytes,
            retryInMillis: retryIn
        )
    }
}
