/// One connection's close handshake (RFC 6455 §5.5.1, §7.1.2): which close frames went which
/// way, and what the link must do next. Pure, as the connection and heartbeat machines are:
/// the link performs the action it returns (write the frame, then wait for the server to end
/// TCP) and keeps no flag of its own beside it.
package struct CloseHandshake: Sendable, Equatable {
    package enum State: Sendable, Equatable {
        /// No close frame either way: data may go.
        case open
        /// Ours went first; the server's has not come.
        case sent
        /// Both went (the server's first, answered by ours, or as the echo of ours): only the
        /// TCP end is left. `code` and `reason` are the server's.
        case done(code: UInt16?, reason: String)
    }

    package enum Action: Sendable, Equatable {
        case none
        /// Write our close frame, then wait for the server to end TCP.
        case sendClose(code: UInt16, reason: String)
    }

    package private(set) var state: State = .open

    package init() {}

    /// No close frame was sent: data, pings and pongs may go (none may follow a close frame).
    package var mayWrite: Bool { self.state == .open }

    /// The server's close frame, once it came.
    package var serverClose: (code: UInt16?, reason: String)? {
        if case .done(let code, let reason) = self.state { return (code, reason) }
        return nil
    }

    /// We close (an operator, the daemon stopping, a protocol error): our frame goes, once.
    package mutating func close(code: UInt16, reason: String) -> Action {
        guard self.state == .open else { return .none }
        self.state = .sent
        return .sendClose(code: code, reason: reason)
    }

    /// The server's close frame came. The first one counts (a peer must not send another); if
    /// ours has not gone, it goes now, echoing the server's code (1000 when it gave none).
    package mutating func received(code: UInt16?, reason: String) -> Action {
        switch self.state {
        case .open:
            self.state = .done(code: code, reason: reason)
            return .sendClose(code: code ?? 1000, reason: "")
        case .sent:
            self.state = .done(code: code, reason: reason)
            return .none
        case .done:
            return .none
        }
    }
}
