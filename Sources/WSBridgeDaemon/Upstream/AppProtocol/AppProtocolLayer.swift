import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// The application protocol on the link (`upstream.protocol`, docs/protocols.md): the protocol
/// session (`AppProtocolSession`: ids, subscriptions, what the handshake answered)
/// carried out. It is the link's event sink when a protocol is set, in front of the fan-out:
/// an upstream message goes through the session, and on to every subscriber (a broadcast) or
/// to the app it belongs to (numbered in the stream like every message, but kept out of the
/// replay ring and the journal: a new connection owns nothing, so a replay of them would reach
/// nobody's); every other event goes on to the fan-out as it is. Apps' messages come in through
/// the plane and go to the link (`+Effects`). With `raw` there is no such layer and the link's
/// events go straight to the fan-out. Confined to the daemon's event loop.
final class AppProtocolLayer: UpstreamEventSink {
    /// The protocol's session, changed in place only (`withSession`): a copy would make every
    /// table it changes copy itself first.
    var session: AppProtocolSession
    /// Where `request`s wait (the plane's one registry): this layer answers those waiting for
    /// a message with the protocol's ids.
    let requests: PendingRequests
    /// The server's last error report (status `protocol.server_error`).
    var serverError: AppProtocolServerError?
    /// Where messages for subscribers go: numbered, journaled, fanned out.
    let fanout: Fanout
    /// Where the link's other events go (state lines, binary messages): the fan-out, or for a
    /// pool's later connection the pool (their state is theirs, not the feed's).
    let passOn: any UpstreamEventSink
    let logger: Logger
    let eventLoop: any EventLoop
    /// For the lines it writes itself (replies, a follower's app's bytes).
    let allocator = ByteBufferAllocator()
    /// A text protocol's (Socket.IO, STOMP, NATS): its binary WebSocket messages are its text too.
    let isText: Bool
    /// The session's routing keys: a message with none of them is a broadcast, told without the session.
    let routing: RoutingKeys?
    /// Whether the codec scans: calls' answers and subscriptions' events routed by a scan (`+Scan`).
    let scans: Bool
    /// The codec's `scanTellsBroadcasts`.
    let scanTellsBroadcasts: Bool
    /// The session's codec, read without the session (a copy of it would retain all it holds).
    let codec: any AppProtocolCodec
    /// The codec's `broadcastPrefixes`, kept (a text protocol's message that begins so is a broadcast).
    let broadcastPrefixes: [[UInt8]]
    /// Ids as the wire spells them, the last few written into messages (`+Scan`): a subscription's
    /// holders' ids are spelled once, not for every message.
    var spellings: [(id: WireID, text: ByteBuffer)] = []
    /// The client of the session's kept route's one holder (`+Scan`).
    var keptHolder: KeptHolder?
    /// The client an answer went to last, while the fan-out's clients are the same
    /// (`Fanout.clientsVersion`).
    var lastClient: (app: AppID, clients: UInt64, client: LocalClient)?

    /// `protocol.confirm_timeout`, and the wait for the restore's subscription in flight.
    let confirmTimeout: Duration
    var restoreWatch = RestoreWatch()
    /// Apps' JSON-RPC batches waiting for their answers (`+Effects`).
    var batches = AppProtocolBatches()
    /// A renewal's overlap: the other connection's session beside this one, until the old one
    /// ended (AppProtocolLayer+Overlap). What the two deliver is deduped by the link's overlap.
    var overlap: AppProtocolOverlap?
    /// On a fleet follower: its bridge, whose layer holds this host's apps (`+Remote`).
    weak var remote: (any RemoteProtocolApps)?

    init(
        session: AppProtocolSession, fanout: Fanout, requests: PendingRequests, passOn: (any UpstreamEventSink)? = nil, eventLoop: any EventLoop,
        logger: Logger,
        confirmTimeout: Duration = .seconds(1)
    ) {
        self.confirmTimeout = confirmTimeout
        self.session = session
        self.fanout = fanout
        self.passOn = passOn ?? fanout
        self.eventLoop = eventLoop
        self.logger = logger
        self.requests = requests
        self.isText = session.codec.isText
        self.routing = session.routing
        self.scans = session.codec.scansUpstream
        self.scanTellsBroadcasts = session.codec.scanTellsBroadcasts
        self.codec = session.codec
        self.broadcastPrefixes = session.codec.broadcastPrefixes
    }

    // MARK: - The link's events

    func upstreamLink(_ link: any LinkControl, emitted event: UpstreamEvent) {
        switch event {
        case .message(let message) where message.kind == .text || self.isText:
            if self.isText {
                self.routeText(message, link: link)
                return
            }
            let routed = self.route(message, link: link)
            if routed.broadcast {
                self.fanout.publish(message, parsed: routed.parsed)
            } else if self.fanout.hasWireTaps {
                self.fanout.tapWire(message, parsed: routed.parsed)
            }
        case .state(let phase, let reason, let closedRightAfterOpen):
            // The state line first, then what the session does about it.
            self.passOn.upstreamLink(link, emitted: event)
            self.protocolLink(link, changedTo: phase, reason: reason, closedRightAfterOpen: closedRightAfterOpen)
        default:
            self.passOn.upstreamLink(link, emitted: event)
        }
    }

    func upstreamLinkReadComplete(_ link: any LinkControl) {
        self.fanout.upstreamLinkReadComplete(link)
    }

    // MARK: - Routing

    /// A text message from the upstream, through the protocol layer: whether it goes on to every
    /// subscriber (a broadcast), as before.
    @inline(never)  // off the raw message path, which only tests `routing`
    func route(_ message: UpstreamMessage, link: any LinkControl) -> (broadcast: Bool, parsed: JSONValue?) {
        // None of the protocol's keys in the text: for everyone, without reading it (after the
        // scan, where it tells broadcasts itself).
        if !self.scanTellsBroadcasts, let routing = self.routing, !message.data.withUnsafeReadableBytes({ routing.mayRoute($0) }) {
            return (true, nil)
        }
        // Routed (or published) by a scan: nothing left for the caller.
        if self.routeByScan(message) > 0 { return (false, nil) }
        if self.scanTellsBroadcasts, let routing = self.routing, !message.data.withUnsafeReadableBytes({ routing.mayRoute($0) }) {
            return (true, nil)
        }
        guard let json = try? JSONValue.parse(message.data.readableBytesView) else { return (true, nil) }
        let effects = self.withSession { $0.fromUpstream(json) }
        let performed = self.perform(effects, link: link, receivedAtMillis: message.receivedAtMillis, original: (json, message.data))
        self.watchRestore(link: link)
        return (performed.broadcast, json)
    }

    /// A WebSocket message of a text protocol (Socket.IO, STOMP, NATS): each of the protocol's
    /// messages in it goes through the protocol layer, and each broadcast is a message of its own
    /// (its own seq), its view parsed for filters and `inline_json`.
    @inline(never)
    func routeText(_ message: UpstreamMessage, link: any LinkControl) {
        // A server event for everyone, when nobody needs its view (a filter, inline_json, a
        // request's match): as it came, unread.
        if !self.broadcastPrefixes.isEmpty, !self.fanout.needsView, !self.session.hasPartialText(),
            message.data.withUnsafeReadableBytes({ bytes in self.broadcastPrefixes.contains { bytes.starts(with: $0) } })
        {
            self.fanout.publish(UpstreamMessage(kind: .text, data: message.data, receivedAtMillis: message.receivedAtMillis))
            return
        }
        let scanned = self.routeByScan(message)
        if scanned == message.data.readableBytes { return }
        var message = message
        message.data.moveReaderIndex(forwardBy: scanned)
        let split = message.data.withUnsafeReadableBytes { self.session.split(upstream: $0) }
        switch split {
        case .failure(let error):
            self.logger.warning(
                "\(self.session.name): \(error); the upstream message goes to every subscriber as it came",
                metadata: ["protocol": "\(self.session.name)"])
            self.fanout.publish(UpstreamMessage(kind: .text, data: message.data, receivedAtMillis: message.receivedAtMillis))
        case .success(let messages):
            // One message that is the whole WebSocket message: its bytes as they came, no copy.
            let whole = messages.count == 1 && messages[0].text.utf8.count == message.data.readableBytes
            for one in messages {
                let effects = self.withSession { $0.fromUpstream(one.view) }
                let data = whole ? message.data : ByteBuffer(string: one.text)
                let wire = UpstreamMessage(kind: .text, data: data, receivedAtMillis: message.receivedAtMillis)
                if self.perform(effects, link: link, receivedAtMillis: message.receivedAtMillis, original: (one.view, data)).broadcast {
                    self.fanout.publish(wire, parsed: one.view)
                } else if self.fanout.hasWireTaps {
                    self.fanout.tapWire(wire, parsed: one.view)
                }
            }
            self.watchRestore(link: link)
        }
    }

    /// Waits `protocol.confirm_timeout` for the restore's subscription in flight (a new one
    /// each time the session sends the next); when it passes unconfirmed, the next goes.
    func watchRestore(link: any ProtocolTransport) {
        self.restoreWatch.watch(self.session.restoreStep, after: self.confirmTimeout, on: self.eventLoop) { step in
            let effects = self.withSession { $0.confirmationTimedOut(step: step) }
            self.perform(effects, link: link, receivedAtMillis: WallClock.millisecondsSinceEpoch())
            self.watchRestore(link: link)
        }
    }

    /// Runs `body` on the protocol layer, its clock set (nil: no protocol).
    func withSession<T>(_ body: (inout AppProtocolSession) -> T) -> T {
        self.session.now = WallClock.millisecondsSinceEpoch()
        return body(&self.session)
    }

    /// The link opened (the session re-established, the handshake acknowledged) or left `open`.
    func protocolLink(_ link: any LinkControl, changedTo phase: ConnectionPhase, reason: String, closedRightAfterOpen: Bool) {
        let lost = "the upstream link went \(phase.rawValue) (\(reason)) before the answer came"
        let culprit = self.session.culprit
        let effects = self.withSession {
            phase == .open ? $0.opened() : $0.lost(reason: lost, closedRightAfterOpen: closedRightAfterOpen ? reason : nil)
        }
        if let now = self.session.culprit, now != culprit {
            self.logger.warning("\(now)", metadata: ["protocol": "\(self.session.name)"])
        }
        self.perform(effects, link: link, receivedAtMillis: WallClock.millisecondsSinceEpoch(), lost: phase == .open ? nil : lost)
        self.watchRestore(link: link)
        if phase != .open { self.overlapLost(lost) }
    }

    /// Its part of `status`: the subscriptions and who holds them, the culprit of a close right
    /// after open, the server's last error.
    /// `connection`: a pool's connection number, on each subscription.
    func report(into report: inout StatusReport, connection: Int? = nil) {
        report.protocol = .init(
            name: self.session.name,
            subscriptions: self.session.liveSubscriptions.map { live in
                .init(
                    upstreamId: live.upstreamID, key: live.key,
                    holders: live.holders.map { holder in
                        let credentials = self.fanout.client(holder.app)?.credentials ?? self.fanout.frames.app(holder.app)?.peer.credentials
                        return .init(client: holder.app, pid: credentials?.pid, uid: credentials?.uid, id: holder.id)
                    }, since: live.since, setAside: live.setAside, connection: connection)
            }, culprit: self.session.culprit, serverError: self.serverError?.text, serverErrorAt: self.serverError?.at)
    }
}

/// The wait for a restore's subscription in flight (`protocol.confirm_timeout`): one timer, for
/// the step it was armed for.
struct RestoreWatch {
    private var timer: Scheduled<Void>?
    private var step: Int?

    /// Waits `after` for `step` (nil: no restore under way: nothing); a new step replaces the
    /// last one's wait. `fire` is called with the step when it passes.
    mutating func watch(_ step: Int?, after: Duration, on eventLoop: any EventLoop, fire: @escaping (Int) -> Void) {
        guard step != self.step else { return }
        self.step = step
        self.timer?.cancel()
        self.timer = nil
        guard let step else { return }
        self.timer = eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(after.nanoseconds)) { fire(step) }
    }

    mutating func cancel() {
        self.timer?.cancel()
        self.timer = nil
        self.step = nil
    }
}

@available(*, unavailable)
extension AppProtocolLayer: Sendable {}
