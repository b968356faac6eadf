/// What one connection has of its own, from its attempt to its end, nested in the connection
/// machine's states that have a connection (`connecting`, `open`, `closing`): its close
/// handshake, from its open on its heartbeat, and the application protocol's keepalive its
/// server set. A new attempt starts a new context; nothing of it outlives the connection.
struct ConnectionContext: Sendable, Equatable {
    /// Which close frames went which way on this connection.
    var close = CloseHandshake()
    /// Its pings, the round trip, the pong deadline (nil: not open yet, or no heartbeat).
    var heartbeat: HeartbeatStateMachine?
    /// The keepalive the application protocol's server set on this connection (nil: none).
    var keepalive: ProtocolKeepalive?

    /// Its heartbeat starts (`heartbeat`: the link's settings; nil: none).
    mutating func startHeartbeat(_ heartbeat: LinkStateMachine.Settings.Heartbeat?, now: MonotonicInstant) {
        self.heartbeat = heartbeat.map { HeartbeatStateMachine(interval: $0.interval, deadline: $0.deadline, now: now) }
    }
}
