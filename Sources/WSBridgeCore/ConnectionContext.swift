/// What one connection has of its own, from its attempt to its end, nested in the connection
/// machine's states that have a connection (`connecting`, `open`, `closing`): its close
/// handshake. A new attempt starts a new context; nothing of it outlives the connection.
@usableFromInline
struct ConnectionContext: Sendable, Equatable {
    /// Which close frames went which way on this connection.
    var close = CloseHandshake()
}
