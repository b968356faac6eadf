import WSBridgeProtocol

/// Why a link ended (or an attempt failed).
public enum DisconnectReason: Sendable, Equatable, CustomStringConvertible {
    /// The server sent a close frame (code nil when the frame carried none) or ended the connection.
    case serverClosed(code: UInt16?, reason: String)
    /// Our own close, asked for by a user (`close`, `reconnect`), acknowledged or timed out.
    case userClosed(code: UInt16, reason: String)
    /// The daemon closed the link itself because it is stopping (code 1001).
    case daemonStopped
    /// A connection, TLS, handshake or protocol error.
    case error(String)
    /// No pong nor any frame within the heartbeat deadline.
    case heartbeatTimeout(silence: Duration)
    /// The route to the upstream host disappeared.
    case networkLost

    public var description: String {
        switch self {
        case .serverClosed(let code, let reason):
            let c = code.map { String($0) } ?? "none"
            return reason.isEmpty ? "server closed (code \(c))" : "server closed (code \(c), \"\(reason)\")"
        case .userClosed(let code, let reason):
            return reason.isEmpty ? "closed by user (code \(code))" : "closed by user (code \(code), \"\(reason)\")"
        case .daemonStopped:
            return "closed by the daemon: wsbridged is stopping (code 1001)"
        case .error(let message):
            return message
        case .heartbeatTimeout(let silence):
            return "heartbeat deadline passed: nothing received for \(silence.short)"
        case .networkLost:
            return "network lost: no route to the upstream host"
        }
    }

    /// Who ended the link.
    public var initiator: StatusReport.Close.Closer {
        switch self {
        case .serverClosed: .server
        case .userClosed: .user
        case .daemonStopped: .daemon
        case .error, .heartbeatTimeout, .networkLost: .error
        }
    }

    /// How `status` reports the link's end: who, the close code, the reason.
    public var close: StatusReport.Close {
        switch self {
        case .serverClosed(let code, let reason): StatusReport.Close(code: code, reason: reason, by: self.initiator)
        case .userClosed(let code, let reason): StatusReport.Close(code: code, reason: reason, by: self.initiator)
        case .daemonStopped: StatusReport.Close(code: 1001, reason: "wsbridged is stopping", by: self.initiator)
        case .error(let e): StatusReport.Close(code: nil, reason: e, by: self.initiator)
        case .heartbeatTimeout, .networkLost: StatusReport.Close(code: nil, reason: self.description, by: self.initiator)
        }
    }
}
