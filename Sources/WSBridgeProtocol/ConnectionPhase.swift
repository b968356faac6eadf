/// The externally visible phase of the upstream link, as logged, published and reported.
public enum ConnectionPhase: String, Sendable, Equatable, CaseIterable {
    /// Closed by the user (or given up after `backoff.max_attempts`): stays closed until asked to connect.
    case idle
    case connecting
    case open
    case closing
    /// No route to the upstream host: waiting without spending attempts.
    case waitingForNetwork
    /// Sleeping before the next attempt.
    case backingOff
    /// The daemon is shutting down.
    case stopped
}

extension ConnectionPhase: CustomStringConvertible {
    public var description: String { self.rawValue }

    /// The phase in `wsbridgectl`'s readable text (the wire name is for programs).
    public var readable: String {
        switch self {
        case .idle: "closed"
        case .connecting: "connecting"
        case .open: "open"
        case .closing: "closing"
        case .waitingForNetwork: "waiting for the network"
        case .backingOff: "waiting to retry"
        case .stopped: "stopping"
        }
    }

    /// The phase a line or result names. A name this build does not know (only a daemon of a
    /// newer protocol version could send one) reads as `idle`.
    public init(wire text: String?) {
        self = text.flatMap(ConnectionPhase.init(rawValue:)) ?? .idle
    }
}

extension ConnectionPhase: Codable {
    public init(from decoder: any Decoder) throws {
        self.init(wire: try? decoder.singleValueContainer().decode(String.self))
    }
}
