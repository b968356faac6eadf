import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// A renewal of the link's connection (`upstream.max_lifetime`, `upstream.renew_when`,
/// docs/limits.md), from the second connection's attempt to the old one's end. What it decides
/// is the link's machine's (`LinkSupervisor` with its `RenewalMachine`, pure, in Core: when one
/// starts, takeover, close, failure, a renewal that waits); this holds what a machine cannot: the
/// second connection (`successor`) and the old one (`retiring`), the overlap's dedupe, and the
/// timers. Its state changes only through its methods; the link drives it
/// (UpstreamLink+Renewal.swift). Confined to the link's event loop.
final class Renewal {
    /// The second connection, from its attempt until it delivers and takes over.
    private(set) var successor: UpstreamConnection?
    /// The old connection, after the new one took over, until its TCP ends.
    private(set) var retiring: UpstreamConnection?
    /// What the two connections deliver, each once (`RenewalOverlap`: the overlap, then its
    /// moment after the old connection ended): the wire's messages, or with a protocol what
    /// they deliver as apps see it (its layer tells). The only overlap: the link owns it.
    private(set) var overlap = RenewalOverlap<OverlapItem>() {
        didSet { self.isOverlapping = self.overlap.isOverlapping }
    }
    /// An overlap's dedupe is on, or the last one's still: messages are compared. Read for every
    /// message the link receives, so kept as a flag beside `overlap`: reading the generic struct
    /// from here copied it each time (~90 instructions a message, `wsbridge-bench cost`), and
    /// making its getter `@inlinable` did not remove the copy (measured).
    private(set) var isOverlapping = false
    /// The end of the last overlap's moment.
    private var tailEnd: Scheduled<Void>?
    var duplicatesDropped: Int { self.overlap.duplicatesDropped }
    /// The connection's lifetime, until its renewal starts.
    private var lifetime: Scheduled<Void>?
    /// When the lifetime ends (nil: no renewal planned).
    private(set) var lifetimeEnds: MonotonicInstant?
    /// The renewal's deadline (`upstream.renew_timeout`), then the old connection's close
    /// deadline while requests sent on it wait for their answers.
    private var deadline: Scheduled<Void>?

    var isUnderway: Bool { self.successor != nil || self.retiring != nil }

    /// Which of the renewal's connections `connection` is: true the new one (before it took
    /// over), false the old one (after), nil neither.
    func isSuccessor(_ connection: UpstreamConnection) -> Bool? {
        if connection === self.successor { return true }
        if connection === self.retiring { return false }
        return nil
    }

    func armLifetime(_ timer: Scheduled<Void>?, ends: MonotonicInstant?) {
        self.lifetime?.cancel()
        self.lifetime = timer
        self.lifetimeEnds = ends
    }

    var hasDeadline: Bool { self.deadline != nil }

    func setDeadline(_ timer: Scheduled<Void>?) {
        self.deadline?.cancel()
        self.deadline = timer
    }

    /// A renewal starts (the machine let it): `successor` is its connection; `dedupe` is
    /// `upstream.dedupe`'s paths and window.
    func start(_ successor: UpstreamConnection, dedupe: (paths: [String], window: Int)) {
        self.setDeadline(nil)
        self.armLifetime(nil, ends: nil)
        self.successor = successor
        self.overlap.begin(paths: dedupe.paths, window: dedupe.window)
    }

    /// What the overlap delivers of `message`, from the link's current connection or the
    /// renewal's other one (all of it when there is no overlap).
    func admit(_ message: UpstreamMessage, fromCurrent: Bool) -> UpstreamMessage? {
        let admitted = message.data.withUnsafeReadableBytes { self.overlap.admit(.wire(message), bytes: $0, fromCurrent: fromCurrent) }
        guard case .wire(let message)? = admitted else { return nil }
        return message
    }

    /// What the overlap delivers of `delivery` (the protocol layer's reading of a message of the
    /// current connection or the other one), known by `key` (only its hash is kept).
    func admit(_ delivery: OverlapDelivery, key: ByteBuffer, fromCurrent: Bool) -> OverlapDelivery? {
        let admitted = key.withUnsafeReadableBytes { self.overlap.admit(.delivery(delivery), bytes: $0, fromCurrent: fromCurrent) }
        guard case .delivery(let delivery)? = admitted else { return nil }
        return delivery
    }

    /// The new connection has caught up with the old one and may take over (`OverlapDedupe`'s
    /// rule), unless its protocol session still restores what had not worked when the overlap
    /// began (`restoring`: the old connection's events of those are the only ones until then).
    /// The overlap's memory full (`upstream.dedupe_window`) takes over all the same.
    func caughtUp(restoring: Bool) -> Bool {
        guard let dedupe = self.overlap.dedupe, !dedupe.tookOver else { return false }
        return (dedupe.caughtUp && !restoring) || dedupe.isFull
    }

    /// The successor took over (the machine said so); `old` closes. Returns what the new
    /// connection held (it was ahead of the old), for the link to deliver first, in order.
    func tookOver(old: UpstreamConnection) -> [OverlapItem] {
        self.setDeadline(nil)
        // The last overlap's moment is over with it (its connection is the old one now).
        self.endTail()
        let held = self.overlap.takeOver()
        self.successor = nil
        self.retiring = old
        return held
    }

    /// The old connection ended. The overlap's dedupe stays until `end` fires (it calls
    /// `endTail`), replacing the last one's.
    func retired(tailEnds end: Scheduled<Void>) {
        self.retiring?.end()
        self.retiring = nil
        self.setDeadline(nil)
        self.endTail()
        self.overlap.oldEnded()
        self.tailEnd = end
    }

    /// The last overlap's moment is over: messages are no longer compared against it.
    func endTail() {
        self.overlap.endTail()
        self.tailEnd?.cancel()
        self.tailEnd = nil
    }

    /// The renewal failed before its connection took over: it goes; the old stays.
    func failed() {
        self.successor?.end()
        self.successor = nil
        self.overlap.failed()
        self.setDeadline(nil)
    }

    /// The link's connection went (or the daemon stops): every part of a renewal goes with it.
    func abandon() {
        self.successor?.end()
        self.successor = nil
        self.retiring?.end()
        self.retiring = nil
        self.overlap.failed()
        self.setDeadline(nil)
        self.armLifetime(nil, ends: nil)
        self.endTail()
    }

}

@available(*, unavailable)
extension Renewal: Sendable {}

/// What a renewal's overlap compares: the wire's messages (no protocol), or what a message
/// delivers as apps see it (the protocol layer's reading).
enum OverlapItem {
    case wire(UpstreamMessage)
    case delivery(OverlapDelivery)
}

/// A renewal's other connection, as the protocol layer's second session sees it: the new one
/// until it takes over, then the old one while it closes.
final class RenewalConnection: ProtocolTransport {
    private weak var link: UpstreamLink?

    init(_ link: UpstreamLink) {
        self.link = link
    }

    func send(_ message: OutboundMessage) -> SendOutcome {
        guard let link, let connection = link.renewal.successor ?? (link.otherMayWrite ? link.renewal.retiring : nil),
            link.writeOwn(message, on: connection)
        else { return .rejected("the renewal's other connection is gone") }
        return .sent
    }

    func fail(_ description: String) {
        guard let link else { return }
        if let successor = link.renewal.successor {
            link.renewalFailed(successor, description)
        } else {
            link.renewal.retiring?.channel?.close(promise: nil)
        }
    }

    func keepalive(_ timing: AppProtocolTiming, protocol name: String) {
        guard let link, link.renewal.successor != nil else { return }
        // Kept in the new connection's context: it runs once the connection took over.
        link.otherKeepaliveSet(timing, protocol: name)
    }
}

@available(*, unavailable)
extension RenewalConnection: Sendable {}
