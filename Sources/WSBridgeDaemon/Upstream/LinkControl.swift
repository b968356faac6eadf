import WSBridgeCore
import WSBridgeProtocol

/// What the local plane may ask of the upstream link, and read from it. The link is the one
/// source of truth for its phase, round-trip time and counters: nothing else keeps a copy.
/// Confined to the link's event loop, like the link.
protocol LinkControl: AnyObject {
    var phase: ConnectionPhase { get }
    var roundTripTime: Duration? { get }
    /// The URL of the live link, or of the next attempt when none is live.
    var url: UpstreamURL { get }
    /// The link's part of `status` (the plane adds its own counters).
    var status: StatusReport { get }
    /// Sends now, or queues (bounded) until the link opens; with the spool on, `.spooling`
    /// says the outcome follows once the message is stored.
    func send(_ message: OutboundMessage) -> SendOutcome
    /// A session message (sticky send, leave text): written now, ahead of the queue, if the
    /// link is open; false if it is not (sticky sends go after the next open by themselves).
    func sendAhead(_ message: OutboundMessage, key: String?) -> Bool
    /// Why a new sticky key cannot be placed (a pool whose connections are all full); nil: it can.
    func refusal(forNewKey key: String, payload: Payload) -> String?
    /// Sticky key `key` is gone: its place is free.
    func released(key: String)
    func connect()
    func reconnect()
    func close(code: UInt16, reason: String)
    /// The application protocol found the connection dead or over (a keepalive that stopped, the
    /// server's fatal error): dropped without a close handshake, and retried with the backoff.
    func fail(_ description: String)
    /// The application protocol's server set a keepalive on the current connection (what to
    /// send how often, how long a silence means a dead link): the link keeps it with the
    /// connection, and it ends with it.
    func keepalive(_ timing: AppProtocolTiming, protocol name: String)
}

/// Receives the link's events, on the link's event loop. The link holds its sink; the sink
/// does not hold the link (each event says which link it came from), so there is no cycle.
protocol UpstreamEventSink: AnyObject {
    func upstreamLink(_ link: any LinkControl, emitted event: UpstreamEvent)
    /// The socket read that brought the last messages is done (the fan-out sends them now).
    func upstreamLinkReadComplete(_ link: any LinkControl)
    /// Requests waiting for their answers: a renewal's old connection stays open for them.
    func upstreamLinkRequestsInFlight(_ link: any LinkControl) -> Int
}

extension LinkControl {
    func sendAhead(_ message: OutboundMessage) -> Bool { self.sendAhead(message, key: nil) }
    func refusal(forNewKey key: String, payload: Payload) -> String? { nil }
    func released(key: String) {}
}

extension UpstreamEventSink {
    func upstreamLinkReadComplete(_ link: any LinkControl) {}
    func upstreamLinkRequestsInFlight(_ link: any LinkControl) -> Int { 0 }
}

/// A sink that hands each event to a closure (tests, benchmarks, logging).
final class ClosureEventSink: UpstreamEventSink {
    private let body: (UpstreamEvent) -> Void

    init(_ body: @escaping (UpstreamEvent) -> Void) {
        self.body = body
    }

    func upstreamLink(_ link: any LinkControl, emitted event: UpstreamEvent) {
        self.body(event)
    }
}

@available(*, unavailable)
extension ClosureEventSink: Sendable {}
