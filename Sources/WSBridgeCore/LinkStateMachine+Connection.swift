import WSBridgeProtocol

// The current connection's own inputs: its close handshake and its heartbeat, which live in
// its context (`ConnectionContext`), nested in the states that have a connection.
extension LinkStateMachine {
    /// The current connection's context, if there is one.
    var connection: ConnectionContext? {
        switch self.state {
        case .connecting(_, let connection), .open(_, let connection), .closing(_, let connection): connection
        case .idle, .waitingForNetwork, .backingOff, .stopped: nil
        }
    }

    /// The server's close frame on the current connection, once it came.
    public var serverClose: (code: UInt16?, reason: String)? { self.connection?.close.serverClose }

    /// The server's close frame came on the current connection: ours echoes it unless it went
    /// first (RFC 6455 §5.5.1); then the server ends TCP (`disconnected`).
    public mutating func closeFrameReceived(code: UInt16?, reason: String) -> Action {
        Self.action(self.withConnection { $0.close.received(code: code, reason: reason) } ?? .none)
    }

    /// The server broke the WebSocket protocol on the current connection: our close frame goes
    /// with `code` (once), and the connection is dropped.
    public mutating func violated(code: UInt16) -> Action {
        Self.action(self.withConnection { $0.close.close(code: code, reason: "") } ?? .none)
    }

    static func action(_ close: CloseHandshake.Action) -> Action {
        switch close {
        case .none: .none
        case .sendClose(let code, let reason): .sendClose(code: code, reason: reason)
        }
    }

    // MARK: - Heartbeat

    /// Anything came on the current connection: it is alive.
    public mutating func received(now: MonotonicInstant) {
        self.withConnection { $0.heartbeat?.received(now: now) }
    }

    /// A message came on the current connection: alive for the heartbeat, heard for the
    /// protocol's keepalive.
    public mutating func receivedMessage(now: MonotonicInstant) {
        self.withConnection {
            $0.heartbeat?.received(now: now)
            $0.keepalive?.heardFrom()
        }
    }

    /// A pong came: its round trip, when it answers the last ping.
    public mutating func receivedPong(payload: UInt64?, now: MonotonicInstant) -> Duration? {
        self.withConnection { $0.heartbeat?.receivedPong(payload: payload, now: now) } ?? nil
    }

    /// Ping at once and start the deadline (a suspend/resume, a network change). False when no
    /// heartbeat runs.
    public mutating func checkLiveness(now: MonotonicInstant) -> Bool {
        self.withConnection { connection -> Bool in
            guard connection.heartbeat != nil else { return false }
            connection.heartbeat?.checkNow(now: now)
            return true
        } ?? false
    }

    /// What the current connection's heartbeat does at `now` (nil: none runs): ping, wait until
    /// an instant (the driver's one timer), or declare the link dead.
    public mutating func heartbeat(now: MonotonicInstant) -> HeartbeatStateMachine.Decision? {
        self.withConnection { $0.heartbeat?.next(now: now) } ?? nil
    }

    /// The current connection's last measured round trip.
    public var roundTripTime: Duration? { self.connection?.heartbeat?.roundTripTime }

    // MARK: - The application protocol's keepalive

    /// The server set the protocol's keepalive on the current connection (replacing any earlier
    /// one): its sends and its deadline run from `now` until the connection ends.
    package mutating func keepaliveSet(_ timing: AppProtocolTiming, protocol name: String, now: MonotonicInstant) {
        self.withConnection { $0.keepalive = ProtocolKeepalive(timing, name: name, now: now) }
    }

    /// What the current connection's protocol keepalive does at `now` (nil: none runs, or the
    /// connection is closing): send its text (only while open), wait until an instant, or
    /// declare the link dead.
    package mutating func keepalive(now: MonotonicInstant) -> ProtocolKeepalive.Decision? {
        if case .closing = self.state { return nil }
        let open = self.phase == .open
        return self.withConnection { $0.keepalive?.next(now: now, open: open) } ?? nil
    }
}
