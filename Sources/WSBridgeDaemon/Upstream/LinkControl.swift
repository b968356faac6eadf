import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// What the local plane may ask of the upstream link, and read from it. The link is the one
/// source of truth for its phase, round-trip time and counters: nothing else keeps a copy.
/// Confined to the link's event loop, like the link.
protocol LinkControl: ProtocolTransport {
    var phase: ConnectionPhase { get }
    /// What a send queued now waits for.
    var sendsWait: SendWait { get }
    var roundTripTime: Duration? { get }
    /// The URL of the live link, or of the next attempt when none is live.
    var url: UpstreamURL { get }
    /// The link's part of `status` (the plane adds its own counters).
    var status: StatusReport { get }
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
}

/// What the application protocol's layer needs of a connection: the link's current one, or a
/// renewal's other one (`RenewalOverlapSink`).
protocol ProtocolTransport: AnyObject {
    /// Sends now, or queues (bounded) until the link opens; with the spool on, `.spooling`
    /// says the outcome follows once the message is stored.
    func send(_ message: OutboundMessage) -> SendOutcome
    /// The application protocol found the connection dead or over (a keepalive that stopped, the
    /// server's fatal error): dropped without a close handshake, and retried with the backoff.
    func fail(_ description: String)
    /// The application protocol's server set a keepalive on the connection (what to send how
    /// often, how long a silence means a dead link): the link keeps it with the connection, and
    /// it ends with it.
    func keepalive(_ timing: AppProtocolTiming, protocol name: String)
}

/// A sink that runs the application protocol's session on the link's connection (the protocol
/// layer). In a renewal it runs a second session on the new connection and tells what each
/// message delivers as apps see it (the same event carries other ids on each connection); the
/// link's overlap admits each once, by the same rule as the wire's messages without one (`raw`).
protocol RenewalOverlapSink: AnyObject {
    /// A renewal starts: `other` is its new connection.
    func overlapBegan(_ link: any LinkControl, other: any ProtocolTransport)
    /// A message of the current connection (`side` `.current`) or the other one during an
    /// overlap or its moment: what it delivers, each with the bytes it is known by as apps see
    /// it, for the link's overlap to admit (`handshake`: the new connection's session is not
    /// restored yet: nothing).
    func overlapRead(_ link: any LinkControl, _ message: UpstreamMessage, side: OverlapSide, handshake: Bool) -> [(OverlapDelivery, key: ByteBuffer)]
    /// Delivers what the link's overlap admitted.
    func overlapDeliver(_ link: any LinkControl, _ delivery: OverlapDelivery)
    /// The new connection's session still restores what had not worked when the overlap began:
    /// it may not take over yet (unless the overlap's memory is full).
    var overlapRestoring: Bool { get }
    /// The new connection is ready: its session's subscriptions go on it.
    func overlapReady(_ link: any LinkControl)
    /// The new connection took over; the old one closes.
    func overlapTookOver(_ link: any LinkControl)
    /// The other connection ended (`why`): the new one before it took over, or the old one.
    func overlapEnded(_ link: any LinkControl, _ why: String)
}

/// Receives the link's events, on the link's event loop. The link holds its sink; the sink
/// does not hold the link (each event says which link it came from), so there is no cycle.
protocol UpstreamEventSink: AnyObject {
    func upstreamLink(_ link: any LinkControl, emitted event: UpstreamEvent)
    /// The socket read that brought the last messages is done (the fan-out sends them now).
    func upstreamLinkReadComplete(_ link: any LinkControl)
    /// Requests waiting for their answers: a renewal's old connection stays open for them.
    func upstreamLinkRequestsInFlight(_ link: any LinkControl) -> Int
    /// Its part in a renewal's overlap: an application protocol's layer runs the new
    /// connection's session and dedupes as apps see messages; nil (the fan-out's): the link
    /// dedupes the wire's bytes.
    var renewalOverlap: (any RenewalOverlapSink)? { get }
}

extension UpstreamEventSink {
    var renewalOverlap: (any RenewalOverlapSink)? { nil }
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

extension LinkControl {
    var sendsWait: SendWait { self.phase == .open ? .turn : .link }
}
