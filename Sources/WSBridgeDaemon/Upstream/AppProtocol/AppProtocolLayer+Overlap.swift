import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// A renewal with a protocol (docs/protocols.md): the new connection runs a session of its own
/// (`AppProtocolSession.forRenewal`: the same subscriptions, its own ids on the wire), restored on
/// it while the old one delivers; apps' subscribes and ends go to both sessions, their calls to
/// the current one. The same event carries other ids on each connection, so the two are matched
/// as apps see them: the layer tells what a message delivers and the bytes it is known by (its
/// ids mapped back to the apps', by `upstream.dedupe`'s paths in it, else by its bytes); the
/// link's overlap (`RenewalOverlap`, the one rule for the wire's messages too) admits each once.
/// At the takeover the new session is the current one; the old one's stays for the answers still
/// due on the old connection, until it ends.
final class AppProtocolOverlap {
    /// The other connection's session: the new one's until it takes over, then the old one's.
    var session: AppProtocolSession
    /// The other connection (the link resolves which: the new one, then the old one).
    let connection: any ProtocolTransport
    /// The new session's restore (`protocol.confirm_timeout`).
    var restoreWatch = RestoreWatch()
    /// The new connection took over: the other session is the old one's.
    var tookOver = false

    init(session: AppProtocolSession, connection: any ProtocolTransport) {
        self.session = session
        self.connection = connection
    }
}

/// What one upstream message delivers during an overlap: the protocol's deliveries (to every
/// subscriber, to apps), delivered once the link's overlap admits it.
struct OverlapDelivery {
    var effects: [AppProtocolEffect]
    var view: JSONValue?
    var data: ByteBuffer
    var kind: UpstreamMessage.Kind
    var receivedAtMillis: Int64
}

/// Which session a message of an overlap goes through: the current connection's, or the other's.
enum OverlapSide {
    case current
    case other
}

extension AppProtocolLayer: RenewalOverlapSink {
    /// The layer is its own part in a renewal's overlap (`UpstreamEventSink`).
    var renewalOverlap: (any RenewalOverlapSink)? { self }

    func overlapBegan(_ link: any LinkControl, other: any ProtocolTransport) {
        self.endOverlap()
        self.overlap = AppProtocolOverlap(session: self.session.forRenewal(), connection: other)
    }

    /// Not while the new connection still restores subscriptions that had not worked when the
    /// overlap began (one at a time, each confirmed by its first event): the old connection's
    /// events of those are the only ones until then (taking over first lost them).
    var overlapRestoring: Bool { self.overlap.map { !$0.tookOver && $0.session.restoreStep != nil } ?? false }

    func overlapReady(_ link: any LinkControl) {
        guard let overlap, !overlap.tookOver else { return }
        let effects = self.withSide(.other) { $0.opened() }
        self.perform(effects, link: overlap.connection, receivedAtMillis: WallClock.millisecondsSinceEpoch())
        self.watchOtherRestore()
    }

    func overlapTookOver(_ link: any LinkControl) {
        guard let overlap, !overlap.tookOver else { return }
        overlap.tookOver = true
        swap(&self.session, &overlap.session)
        self.session.tookOver(from: overlap.session)
        // The old session's restore is over; the new one's is the layer's.
        overlap.restoreWatch.cancel()
        self.restoreWatch.cancel()
        self.watchRestore(link: link)
    }

    func overlapEnded(_ link: any LinkControl, _ why: String) {
        guard let overlap else { return }
        // Before the takeover the renewal failed: its session goes with its connection.
        if overlap.tookOver {
            self.oldConnectionLost("the upstream connection was renewed, and the old one ended (\(why)) before the answer came", link: link)
        }
        self.endOverlap()
    }

    /// Requests waiting for their answers: the fan-out's, and the calls of a renewal's old
    /// connection (it stays open for them).
    func upstreamLinkRequestsInFlight(_ link: any LinkControl) -> Int {
        var waiting = self.requests.matchedCount
        if let overlap, overlap.tookOver { waiting += overlap.session.callsWaiting }
        return waiting
    }

    /// The link left `open`: a renewal under way goes with it (`lost`: what the calls still due
    /// on its old connection are told).
    func overlapLost(_ lost: String) {
        if let overlap, overlap.tookOver { self.oldConnectionLost(lost, link: nil) }
        self.endOverlap()
    }

    // MARK: - Messages

    /// A message of either connection during an overlap (or of the current one during the last
    /// overlap's moment), through its connection's session: what it sends goes on that
    /// connection; what it delivers is returned, for the link's overlap to admit (`handshake`:
    /// the new connection is not restored yet, and what it delivers goes nowhere, as on any
    /// connection not yet open). What the old connection brings after the takeover is delivered
    /// here when it answers an app waiting on it (a call, a subscribe), else dropped.
    func overlapRead(_ link: any LinkControl, _ message: UpstreamMessage, side: OverlapSide, handshake: Bool) -> [(OverlapDelivery, key: ByteBuffer)] {
        let overlap = self.overlap
        guard side == .current || overlap != nil else { return [] }
        let connection: any ProtocolTransport = overlap.map { side == .current ? link : $0.connection } ?? link
        var parts: [(view: JSONValue?, data: ByteBuffer)]
        if message.kind == .binary && !self.isText {
            parts = [(nil, message.data)]
        } else if self.isText {
            switch self.withSide(side, { s in message.data.withUnsafeReadableBytes { s.split(upstream: $0) } }) {
            case .failure:
                parts = [(nil, message.data)]
            case .success(let messages):
                let whole = messages.count == 1 && messages[0].text.utf8.count == message.data.readableBytes
                parts = messages.map { ($0.view, whole ? message.data : ByteBuffer(string: $0.text)) }
            }
        } else {
            let mayRoute = self.routing.map { keys in message.data.withUnsafeReadableBytes { keys.mayRoute($0) } } ?? true
            parts = [(mayRoute ? try? JSONValue.parse(message.data.readableBytesView) : nil, message.data)]
        }
        // After the takeover the old connection's events are the new one's: it delivers only
        // what answers an app waiting on it (a call, a subscribe).
        let retired = side == .other && overlap?.tookOver == true
        var admit: [(OverlapDelivery, key: ByteBuffer)] = []
        for (view, data) in parts {
            let answers = retired && view.map { overlap?.session.answersWaiting($0) == true } == true
            let effects = view.map { view in self.withSide(side) { $0.fromUpstream(view) } } ?? [.broadcast]
            let original = view.map { ($0, data) }
            self.perform(effects.filter { !$0.isDelivery }, link: connection, receivedAtMillis: message.receivedAtMillis, original: original)
            let deliveries = effects.filter(\.isDelivery)
            guard !handshake, let first = deliveries.first else { continue }
            let delivery = OverlapDelivery(effects: deliveries, view: view, data: data, kind: message.kind, receivedAtMillis: message.receivedAtMillis)
            if retired {
                if answers { self.overlapDeliver(link, delivery) }
                continue
            }
            // Known by what its first delivery carries, as apps see it: read by the overlap's
            // admission only (it keeps a hash of it, not the bytes).
            let key: ByteBuffer = if case .app(_, let json) = first { self.wireBytes(json, original: original) } else { data }
            admit.append((delivery, key))
        }
        if side == .current { self.watchRestore(link: link) } else if overlap?.tookOver == false { self.watchOtherRestore() }
        return admit
    }

    /// Delivers what one upstream message of an overlap delivers (the link's overlap admitted it).
    func overlapDeliver(_ link: any LinkControl, _ delivery: OverlapDelivery) {
        let original = delivery.view.map { ($0, delivery.data) }
        let performed = self.perform(delivery.effects, link: link, receivedAtMillis: delivery.receivedAtMillis, original: original)
        guard performed.broadcast else { return }
        self.fanout.publish(
            UpstreamMessage(kind: delivery.kind, data: delivery.data, receivedAtMillis: delivery.receivedAtMillis), parsed: delivery.view)
    }

    /// Runs `body` on `side`'s session, its clock set.
    private func withSide<T>(_ side: OverlapSide, _ body: (inout AppProtocolSession) -> T) -> T {
        guard side == .other, let overlap else { return self.withSession(body) }
        overlap.session.now = WallClock.millisecondsSinceEpoch()
        return body(&overlap.session)
    }

    /// An app's subscribe or end, on the new connection's session too until it takes over:
    /// what goes upstream goes on the new connection.
    func mirror(_ body: (inout AppProtocolSession) -> [AppProtocolEffect]) {
        guard let overlap, !overlap.tookOver else { return }
        let effects = self.withSide(.other, body)
        guard !effects.isEmpty else { return }
        self.perform(effects, link: overlap.connection, receivedAtMillis: WallClock.millisecondsSinceEpoch())
        self.watchOtherRestore()
    }

    /// The new connection's restore (`watchRestore`'s, for the other session).
    private func watchOtherRestore() {
        guard let overlap else { return }
        overlap.restoreWatch.watch(overlap.session.restoreStep, after: self.confirmTimeout, on: self.eventLoop) { [weak overlap] step in
            guard let overlap, self.overlap === overlap, !overlap.tookOver else { return }
            let effects = self.withSide(.other) { $0.confirmationTimedOut(step: step) }
            self.perform(effects, link: overlap.connection, receivedAtMillis: WallClock.millisecondsSinceEpoch())
            self.watchOtherRestore()
        }
    }

    /// The old connection ended after the takeover: its calls still waiting are told `reason`.
    private func oldConnectionLost(_ reason: String, link: (any ProtocolTransport)?) {
        guard let overlap, overlap.tookOver else { return }
        let effects = self.withSide(.other) { $0.lost(reason: reason) }.filter(\.isDelivery)
        self.perform(effects, link: link ?? overlap.connection, receivedAtMillis: WallClock.millisecondsSinceEpoch(), lost: reason)
    }

    /// The overlap's sessions: the other connection's goes.
    private func endOverlap() {
        self.overlap?.restoreWatch.cancel()
        self.overlap = nil
    }
}
