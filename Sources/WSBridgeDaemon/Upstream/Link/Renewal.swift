import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// A renewal of the link's connection (`upstream.max_lifetime`, `upstream.renew_when`,
/// docs/limits.md), from the second connection's attempt to the old one's end: the second
/// connection (`successor`) while its session is restored, the overlap's dedupe, then the old
/// connection (`retiring`) while it closes. One at a time. Its state changes only through its
/// methods; the link drives it (UpstreamLink+Renewal.swift). Confined to the link's event loop.
final class Renewal {
    /// The second connection, from its attempt until it delivers and takes over.
    private(set) var successor: LinkAttempt?
    /// Its session is restored (opening messages, ready gate, sticky sends): its messages count.
    private(set) var successorReady = false
    /// The sticky keys sent on it: those registered later go when it takes over.
    private(set) var sentKeys: Set<String> = []
    /// The keepalive the protocol's server set on the new connection: the link's once it took over.
    var successorKeepalive: (AppProtocolTiming, String)?
    /// The old connection, after the new one took over, until its TCP ends.
    private(set) var retiring: LinkAttempt?
    /// The old connection's close frame went.
    private(set) var retiringClosed = false
    /// The wire's messages of the two connections, each once (`RenewalOverlap`: the overlap,
    /// then its moment after the old connection ended). Not with a protocol: its layer compares
    /// what they deliver, by the same rule; only the moment (`tailEnd`) is kept here then.
    private(set) var overlap = RenewalOverlap<UpstreamMessage>() {
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
    /// A renewal asked for while the last one's old connection was still closing: why.
    var waiting: String?
    /// Why this renewal, for the log and `status`.
    private(set) var why = ""
    private(set) var startedAt: MonotonicInstant?
    /// The connection's lifetime, until its renewal starts.
    private var lifetime: Scheduled<Void>?
    /// When the lifetime ends (nil: no renewal planned).
    private(set) var lifetimeEnds: MonotonicInstant?
    /// The renewal's deadline (`upstream.renew_timeout`), then the end of the dedupe after the
    /// old connection ended.
    private var deadline: Scheduled<Void>?
    /// Renewals done, and given up.
    private(set) var count = 0
    private(set) var failed = 0
    /// The last renewal: when (wall clock), how long its overlap took, why; or why it failed.
    private(set) var last: StatusReport.Renewal.Last?

    var isUnderway: Bool { self.successor != nil || self.retiring != nil }

    /// The connection the callbacks of `generation` belong to, and which it is.
    func connection(_ generation: Int) -> (LinkAttempt, isSuccessor: Bool)? {
        if let s = self.successor, s.isCurrent(generation) { return (s, true) }
        if let r = self.retiring, r.isCurrent(generation) { return (r, false) }
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

    /// A renewal starts: `successor` is its connection; `dedupe` (`upstream.dedupe`'s paths and
    /// window) when the wire's messages are compared here.
    func start(_ successor: LinkAttempt, why: String, dedupe: (paths: [String], window: Int)?, now: MonotonicInstant) {
        self.clear()
        self.successor = successor
        self.successorKeepalive = nil
        self.successorReady = false
        self.sentKeys = []
        self.why = why
        self.startedAt = now
        if let dedupe { self.overlap.begin(paths: dedupe.paths, window: dedupe.window) }
    }

    /// The successor's session is restored, `keys` the sticky keys sent on it.
    func ready(sent keys: Set<String>) {
        self.successorReady = true
        self.sentKeys = keys
    }

    /// What the overlap delivers of `message`, from the link's current connection or the
    /// renewal's other one (all of it when there is no overlap).
    func admit(_ message: UpstreamMessage, fromCurrent: Bool) -> UpstreamMessage? {
        message.data.withUnsafeReadableBytes { self.overlap.admit(message, bytes: $0, fromCurrent: fromCurrent) }
    }

    /// Sticky key `key` went on the successor too (registered while it was ready).
    func sent(_ key: String) { self.sentKeys.insert(key) }

    /// The successor took over; `old` closes. Returns how long the overlap took, and what the
    /// new connection held (it was ahead of the old), for the link to deliver first, in order.
    func tookOver(old: LinkAttempt, now: MonotonicInstant) -> (took: Duration, held: [UpstreamMessage]) {
        let took = self.startedAt.map { now - $0 } ?? .zero
        self.setDeadline(nil)
        // The last overlap's moment is over with it (its connection is the old one now).
        self.endTail()
        let held = self.overlap.takeOver()
        self.successor = nil
        self.retiring = old
        self.retiringClosed = false
        self.count += 1
        self.last = .init(at: WallClock.millisecondsSinceEpoch(), overlapMs: took.nanoseconds / 1_000_000, why: self.why, failure: nil)
        return (took, held)
    }

    /// The old connection's close frame went.
    func closingRetiring() { self.retiringClosed = true }

    /// The old connection ended. The overlap's dedupe stays until `end` fires (it calls
    /// `endTail`), replacing the last one's.
    func retired(tailEnds end: Scheduled<Void>) {
        self.retiring?.end()
        self.retiring = nil
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

    /// The renewal failed before its connection took over (`why`): it goes; the old stays.
    func failed(_ why: String) {
        self.successor?.end()
        self.successor = nil
        self.overlap.failed()
        self.setDeadline(nil)
        self.failed += 1
        self.last = .init(at: WallClock.millisecondsSinceEpoch(), overlapMs: nil, why: self.why, failure: why)
    }

    /// The link's connection went (or the daemon stops): every part of a renewal goes with it.
    func abandon() {
        self.clear()
        self.endTail()
    }

    /// Every part of a renewal but the last overlap's moment (`tail`) goes.
    private func clear() {
        self.waiting = nil
        self.successor?.end()
        self.successor = nil
        self.retiring?.end()
        self.retiring = nil
        self.overlap.failed()
        self.setDeadline(nil)
        self.lifetime?.cancel()
        self.lifetime = nil
        self.lifetimeEnds = nil
    }
}

@available(*, unavailable)
extension Renewal: Sendable {}

/// A renewal's other connection, as the protocol layer's second session sees it: the new one
/// until it takes over, then the old one while it closes.
final class RenewalConnection: ProtocolConnection {
    private weak var link: UpstreamLink?

    init(_ link: UpstreamLink) {
        self.link = link
    }

    func send(_ message: OutboundMessage) -> SendOutcome {
        guard let link, let connection = link.renewal.successor ?? (link.renewal.retiringClosed ? nil : link.renewal.retiring),
            link.writeOwn(message, on: connection)
        else { return .rejected("the renewal's other connection is gone") }
        return .sent
    }

    func fail(_ description: String) {
        guard let link else { return }
        if let successor = link.renewal.successor {
            link.renewalFailed(successor.generation, description)
        } else {
            link.renewal.retiring?.channel?.close(promise: nil)
        }
    }

    func keepalive(_ timing: AppProtocolTiming, protocol name: String) {
        guard let link, link.renewal.successor != nil else { return }
        link.renewal.successorKeepalive = (timing, name)
    }
}

@available(*, unavailable)
extension RenewalConnection: Sendable {}
