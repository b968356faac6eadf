import NIOCore
import WSBridgeCore

/// A message received from the upstream, reassembled from its frames.
public struct UpstreamMessage: Sendable {
    public enum Kind: Sendable, Equatable {
        case text
        case binary
    }

    public var kind: Kind
    public var data: ByteBuffer
    /// Wall-clock receive time, milliseconds since the Unix epoch.
    public var receivedAtMillis: Int64

    public init(kind: Kind, data: ByteBuffer, receivedAtMillis: Int64) {
        self.kind = kind
        self.data = data
        self.receivedAtMillis = receivedAtMillis
    }
}

/// What the upstream link reports to its observers (logs, local subscribers, tests).
public enum UpstreamEvent: Sendable {
    /// The link entered a new phase; `reason` says why (the close, error or request behind it).
    case state(ConnectionPhase, reason: String)
    /// A connection attempt started.
    case attempt(number: Int)
    /// A retry was scheduled after `delay`.
    case retryScheduled(attempt: Int, delay: Duration)
    /// A heartbeat ping was answered.
    case roundTrip(Duration)
    /// An upstream message.
    case message(UpstreamMessage)
}
