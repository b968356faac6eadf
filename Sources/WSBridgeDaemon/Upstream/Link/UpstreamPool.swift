import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// A pool of connections to one feed (`upstream.subscriptions_per_connection`, docs/limits.md):
/// the subscriptions (sticky keys) are placed on the first connection with room, weighed 1 each or
/// by the length of an array in their text (`upstream.subscription_weight`); when every connection
/// is full the next one opens (up to `upstream.connections`, each attempt within
/// `connect_attempts`). Each connection is an `UpstreamLink` of its own (session restored with its
/// own keys only, heartbeat, backoff, pace, renewal); a lost connection restores only its own
/// keys while the others flow on. A connection whose keys all left closes (the first stays).
/// Apps see one feed: every connection's messages go to the one fan-out (one seq, one journal);
/// their state lines are the first connection's. Sends that are not sticky go on the first open
/// connection. Confined to the links' event loop.
final class UpstreamPool: LinkControl {
    /// The connections, the first (slot 0) first; a slot is free again once its link closed.
    private(set) var links: [UpstreamLink]
    /// Connections whose keys all left, closing; each is stopped once idle, and forgotten.
    private var retiring: [UpstreamLink] = []
    /// Every connection, closing ones included (a daemon's stop stops them all).
    var allLinks: [UpstreamLink] { self.links + self.retiring }
    private let session: UpstreamSession
    private var configuration: Configuration
    private let eventLoop: any EventLoop
    private let logger: Logger
    private let connectors: any UpstreamDialer
    private let metrics: DaemonMetrics
    private let members: PoolMemberSink
    /// With upstream.protocol: each connection's protocol layer, by slot (the first's is the
    /// bridge's), and how a new connection's is made.
    private(set) var layers: [Int: AppProtocolLayer] = [:]
    private let makeLayer: ((Int, any UpstreamEventSink) -> AppProtocolLayer)?
    /// Where the keys are, and which connections are open for them (the pure part).
    private var placement: PoolPlacement

    init(
        first: UpstreamLink, fanout: any UpstreamEventSink, session: UpstreamSession, configuration: Configuration, eventLoop: any EventLoop,
        logger: Logger, connectors: any UpstreamDialer, metrics: DaemonMetrics, firstLayer: AppProtocolLayer? = nil,
        makeLayer: ((Int, any UpstreamEventSink) -> AppProtocolLayer)? = nil
    ) {
        self.links = [first]
        self.placement = PoolPlacement(capacity: configuration.upstream.subscriptionsPerConnection, maxConnections: configuration.upstream.connections)
        self.layers[0] = firstLayer
        self.makeLayer = makeLayer
        self.session = session
        self.configuration = configuration
        self.eventLoop = eventLoop
        self.logger = logger
        self.connectors = connectors
        self.metrics = metrics
        self.members = PoolMemberSink(fanout)
        self.members.pool = self
        session.placement = [:]
        // The daemon-scope keys restored from the spool directory, placed as they were registered.
        for entry in session.registry.ordered {
            if let full = self.refusal(forNewKey: entry.key, payload: entry.payload) {
                logger.error("sticky key \(entry.key) restored but not placed: \(full)")
            }
        }
    }

    var first: UpstreamLink { self.links[0] }
    /// Several connections may open (`upstream.subscriptions_per_connection`): `status` lists
    /// them, each subscription with its connection. Else the pool is its one connection.
    var isPool: Bool { self.configuration.upstream.subscriptionsPerConnection != nil }

    // MARK: - LinkControl: the first connection's state is the feed's

    var phase: ConnectionPhase { self.first.phase }
    var roundTripTime: Duration? { self.first.roundTripTime }
    var url: UpstreamURL { self.first.url }

    var status: StatusReport {
        var report = self.first.status
        guard self.isPool else { return report }
        report.connections = self.links.map { link in
            let s = link.status
            return StatusReport.Connection(
                connection: link.slot + 1, state: s.state, since: s.since, url: s.url, subscriptions: self.load(on: link.slot),
                keys: self.placement.keys.values.filter { $0.slot == link.slot }.count, rttMs: s.rttMs, reconnects: s.reconnects,
                renewals: s.renewal?.renewals ?? 0, messagesIn: s.traffic.messagesIn, messagesOut: s.traffic.messagesOut,
                waiting: s.limits?.waiting ?? 0, lastClose: s.lastClose, culprit: self.session.culprits[link.slot])
        }
        return report
    }

    /// A send that is not a subscription: on the first open connection (queued on the first
    /// when none is open).
    func send(_ message: OutboundMessage) -> SendOutcome {
        self.firstOpen.send(message)
    }

    var sendsWait: SendWait { self.firstOpen.sendsWait }

    /// The first open connection (the first when none is open): where sends that are not
    /// subscriptions go.
    private var firstOpen: UpstreamLink { self.links.first { $0.phase == .open } ?? self.first }

    func sendAhead(_ message: OutboundMessage, key: String?) -> Bool {
        // The key goes with it: a renewal's new connection that carried it does not get it again.
        guard let key, let slot = self.placement.keys[key]?.slot, let link = self.links.first(where: { $0.slot == slot }) else {
            return self.first.sendAhead(message, key: key)
        }
        return link.sendAhead(message, key: key)
    }

    /// Places a new key on the first connection with room, opening the next when all are full.
    func refusal(forNewKey key: String, payload: Payload) -> String? {
        if self.placement.keys[key] != nil { return nil }
        let placed = self.placement.place(key, weight: self.weight(of: payload), extra: self.layerLoad)
        switch placed {
        case .refused(let why): return why
        case .on(let slot), .open(let slot):
            if case .open = placed { self.open(slot) }
            self.session.placement?[key] = slot
            return nil
        }
    }

    /// The weight of connection `slot`'s protocol layer's subscriptions.
    private func layerLoad(_ slot: Int) -> Int {
        self.layers[slot]?.session.subscriptionLoad { self.weight(of: $0) } ?? 0
    }

    /// The weight on `slot`: its sticky keys', and its protocol layer's subscriptions.
    private func load(on slot: Int) -> Int {
        self.placement.load(on: slot, extra: self.layerLoad(slot))
    }

    /// The first connection with room for `weight` more, the next one opened when all are full;
    /// or why none can take it (`what` names it).
    func slot(forNew weight: Int, what: String) -> Result<Int, PoolFull> {
        switch self.placement.slot(forNew: weight, what: what, extra: self.layerLoad) {
        case .refused(let why): return .failure(PoolFull(description: why))
        case .on(let slot): return .success(slot)
        case .open(let slot):
            self.open(slot)
            return .success(slot)
        }
    }

    /// Opens connection `slot` (every other is full).
    private func open(_ slot: Int) {
        self.placement.opened(slot)
        // With upstream.protocol the connection gets a protocol layer of its own (its ids, its
        // subscriptions, its handshake), its events through it.
        let layer = self.makeLayer?(slot, self.members)
        let link = UpstreamLink(
            configuration: self.configuration, networkAvailable: self.first.networkAvailable, eventLoop: self.eventLoop, logger: self.logger,
            connectors: self.connectors, events: layer ?? self.members, metrics: self.metrics, session: self.session,
            connectAttempts: self.first.connectAttempts, slot: slot)
        self.layers[slot] = layer
        self.links.append(link)
        self.links.sort { $0.slot < $1.slot }
        self.logger.notice(
            "connection \(slot + 1) opens: the other \(self.links.count - 1) hold upstream.subscriptions_per_connection = \(self.placement.capacity) subscriptions",
            metadata: ["upstream.connection": "\(slot + 1)"])
        // Connected now, unless the first waits for a connect request (not started yet, or closed
        // by an operator): the pool's `connect` connects them all.
        if self.first.phase != .idle { link.connect() }
    }

    /// A key went: its place is free; a connection (not the first) left with none closes.
    func released(key: String) {
        self.session.placement?[key] = nil
        if let slot = self.placement.release(key, extra: self.layerLoad) { self.retire(slot) }
    }

    /// Connection `slot` (not the first) closes once nothing is on it: no sticky key, no
    /// subscription of its protocol layer.
    func retireIfEmpty(_ slot: Int) {
        guard self.placement.retirable(slot, extra: self.layerLoad(slot)) else { return }
        self.retire(slot)
    }

    private func retire(_ slot: Int) {
        guard let index = self.links.firstIndex(where: { $0.slot == slot }) else { return }
        let link = self.links.remove(at: index)
        self.placement.retired(slot)
        self.layers[slot] = nil
        self.session.blame(nil, slot: slot)
        self.logger.notice("connection \(slot + 1) closes: its subscriptions all left", metadata: ["upstream.connection": "\(slot + 1)"])
        self.retiring.append(link)
        link.close(code: 1000, reason: "its subscriptions all left")
    }

    /// A connection of the pool changed phase: a closing one that is idle stops (its promise
    /// kept) and is forgotten.
    func member(_ link: any LinkControl, changedTo phase: ConnectionPhase) {
        guard phase == .idle, let index = self.retiring.firstIndex(where: { $0 === link }) else { return }
        let link = self.retiring.remove(at: index)
        // Out of the link's own transition (it is telling this one).
        self.eventLoop.assumeIsolated().execute { _ = link.shutdown() }
    }

    /// A sticky text's weight: the length of the array at `upstream.subscription_weight`, else 1.
    private func weight(of payload: Payload) -> Int {
        guard self.configuration.upstream.subscriptionWeight != nil, case .text(let text) = payload, let json = try? JSONValue.parse(text) else {
            return 1
        }
        return self.weight(of: json)
    }

    /// A subscription message's weight (its view, for a text protocol).
    func weight(of json: JSONValue) -> Int {
        guard let path = self.configuration.upstream.subscriptionWeight, case .array(let items)? = json.value(at: path) else { return 1 }
        return max(1, items.count)
    }

    func connect() { for link in self.links { link.connect() } }
    func reconnect() { for link in self.links { link.reconnect() } }
    func close(code: UInt16, reason: String) { for link in self.links { link.close(code: code, reason: reason) } }
    func fail(_ description: String) { self.first.fail(description) }
    func keepalive(_ timing: AppProtocolTiming, protocol name: String) { self.first.keepalive(timing, protocol: name) }

    func update(configuration: Configuration) {
        self.configuration = configuration
        self.placement.update(capacity: configuration.upstream.subscriptionsPerConnection, maxConnections: configuration.upstream.connections)
        for link in self.links { link.update(configuration: configuration) }
    }
}

/// The sink of a pool's connections after the first: their messages go to the fan-out as the
/// first's do; their state changes are theirs (logged, in `status`), not the feed's.
final class PoolMemberSink: UpstreamEventSink {
    private let fanout: any UpstreamEventSink
    weak var pool: UpstreamPool?

    init(_ fanout: any UpstreamEventSink) {
        self.fanout = fanout
    }

    func upstreamLink(_ link: any LinkControl, emitted event: UpstreamEvent) {
        switch event {
        case .message: self.fanout.upstreamLink(link, emitted: event)
        case .state(let phase, _, _): self.pool?.member(link, changedTo: phase)
        default: break
        }
    }

    func upstreamLinkReadComplete(_ link: any LinkControl) { self.fanout.upstreamLinkReadComplete(link) }
    func upstreamLinkRequestsInFlight(_ link: any LinkControl) -> Int { self.fanout.upstreamLinkRequestsInFlight(link) }
}

@available(*, unavailable)
extension UpstreamPool: Sendable {}

@available(*, unavailable)
extension PoolMemberSink: Sendable {}

/// Why a pool takes no more subscriptions.
struct PoolFull: Error, CustomStringConvertible {
    var description: String
}
