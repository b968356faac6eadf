import Logging
import NIOCore
import WSBridgeCore

/// The daemon's parts on one event loop, built in dependency order and with no cycles:
///
///     Fanout <-(events)- [AppProtocolLayer] <-(events)- UpstreamLink(s) <- UpstreamPool <-(LinkControl)- LocalPlane
///                                                           |                                       |
///                                                           +---> UpstreamSession <-----------------+
///
/// Always a pool: one connection, unless `upstream.subscriptions_per_connection` lets more open.
/// Each connection's event sink is its protocol layer when `upstream.protocol` is set (it routes
/// messages and passes the rest on to the fan-out), else the fan-out itself; a connection knows
/// nothing else of the plane; the plane is given the pool's control interface (a follower's
/// stream instead), the fan-out and where apps' protocol messages go (`ProtocolMembers`: the
/// pool, or the follower's stream with the bridge's layer) at `init`. Confined to the loop.
final class Bridge {
    let link: UpstreamLink
    /// The connections to the upstream, the first being `link`: one, unless
    /// `upstream.subscriptions_per_connection` lets more open.
    let pool: UpstreamPool
    let plane: LocalPlane
    let fanout: Fanout
    let appProtocol: AppProtocolLayer?
    /// `[fleet] role = "follower"`: the upstream is the fleet's stream, and the plane's link.
    let follower: FleetFollower?
    /// `[fleet]` on a bridge: what the fan-out numbers goes into the stream (Bridge+Fleet).
    let publisher: FleetPublisher?
    let session: UpstreamSession
    let metrics: DaemonMetrics

    init(
        configuration: Configuration,
        policy: AccessPolicy,
        networkAvailable: Bool,
        connectors: any UpstreamDialer,
        eventLoop: any EventLoop,
        logger: Logger,
        spool: (Spool, Spool.Restored)? = nil,
        sticky: (StickyStore, [StickyRegistry.Entry])? = nil,
        journal: (Journal, Journal.Recovered)? = nil,
        nats: NATSLibrary? = nil,
        holder: String = "wsbridged",
        webSocketToken: String? = nil
    ) {
        let status = SystemdStatus()
        let metrics = DaemonMetrics()
        self.metrics = metrics
        // Every `request` waits in it: the plane asks it to wait; the fan-out answers those with
        // `match` from the stream, the protocol layers those answered by id.
        let pending = PendingRequests(eventLoop: eventLoop)
        let follows = configuration.fleet.isOn && configuration.fleet.role == .follower
        // A follower's stream is the fleet's: every follower numbers a message alike (its seq in
        // the JetStream stream), across its restarts (its journal keeps where it was).
        let stream = Fanout.stream(given: follows ? "jetstream-\(configuration.fleet.stream)" : nil, journal: journal?.0)
        // On a bridge of a fleet, what the fan-out numbers goes into the stream too: its tap.
        self.publisher =
            follows || !configuration.fleet.isOn
            ? nil
            : nats.map {
                FleetPublisher(fleet: configuration.fleet, library: $0, feed: stream, journal: journal?.0, eventLoop: eventLoop, logger: logger)
            }
        let fanout = Fanout(
            configuration: configuration.local, status: status, metrics: metrics, eventLoop: eventLoop, pending: pending, journal: journal,
            stream: stream, fleet: self.publisher)
        self.fanout = fanout
        // With an application protocol, its layer stands between the link and the fan-out.
        self.appProtocol = makeAppProtocolSession(configuration.applicationProtocol, maxMessageSize: configuration.upstream.maxMessageSize).map {
            AppProtocolLayer(
                session: $0, fanout: fanout, requests: pending, eventLoop: eventLoop, logger: logger,
                confirmTimeout: configuration.applicationProtocol.confirmTimeout)
        }
        self.session = UpstreamSession(
            configuration: configuration, store: sticky?.0, restored: sticky?.1 ?? [], eventLoop: eventLoop, logger: logger)
        let session = self.session
        self.follower =
            follows
            ? nats.map { FleetFollower(configuration: configuration, library: $0, fanout: fanout, session: session, eventLoop: eventLoop, logger: logger) }
            : nil
        if let follower = self.follower, let layer = self.appProtocol {
            // Its apps are the bridge's layer's: their messages go there as they are.
            layer.remote = follower
            follower.protocolLayer = layer
        }
        self.link = UpstreamLink(
            configuration: configuration,
            networkAvailable: networkAvailable,
            eventLoop: eventLoop,
            logger: logger,
            connectors: connectors,
            events: self.appProtocol ?? self.fanout,
            metrics: metrics,
            spool: spool,
            session: self.session
        )
        // With a protocol, each connection of a pool gets a layer of its own, numbering its ids
        // from a range of its own (2^40 apart).
        let protocolSettings = configuration.applicationProtocol
        let maxMessageSize = configuration.upstream.maxMessageSize
        let makeLayer: ((Int, any UpstreamEventSink) -> AppProtocolLayer)? =
            self.appProtocol == nil
            ? nil
            : { slot, members in
                var session = makeAppProtocolSession(protocolSettings, maxMessageSize: maxMessageSize)!
                session.numberIDs(after: UInt64(slot) << 40)
                return AppProtocolLayer(
                    session: session, fanout: fanout, requests: pending, passOn: members, eventLoop: eventLoop, logger: logger,
                    confirmTimeout: protocolSettings.confirmTimeout)
            }
        self.pool = UpstreamPool(
            first: self.link, fanout: self.fanout, session: self.session, configuration: configuration, eventLoop: eventLoop, logger: logger,
            connectors: connectors, metrics: metrics, firstLayer: self.appProtocol, makeLayer: makeLayer)
        self.plane = LocalPlane(
            configuration: configuration,
            policy: policy,
            link: self.follower ?? self.pool,
            fanout: self.fanout,
            pending: pending,
            metrics: metrics,
            appProtocol: self.appProtocol,
            protocolMembers: Self.protocolMembers(self.follower, self.pool, self.appProtocol),
            session: self.session,
            fleet: self.publisher,
            status: status,
            eventLoop: eventLoop,
            logger: logger,
            webSocketToken: webSocketToken
        )
        if let publisher = self.publisher { self.wire(publisher, configuration, holder: holder, eventLoop: eventLoop, logger: logger) }
    }

    /// Where apps' protocol messages go: a follower's stream through the bridge's layer, else
    /// the pool's connections, each with its layer (nil: `raw`).
    private static func protocolMembers(_ follower: FleetFollower?, _ pool: UpstreamPool, _ layer: AppProtocolLayer?) -> (any ProtocolMembers)? {
        guard let layer else { return nil }
        guard let follower else { return pool }
        return OneProtocolMember(layer: layer, link: follower)
    }

    /// Sends what the fan-out numbered; returns the last seq numbered.
    func flushNumbered() -> UInt64 {
        self.fanout.flush()
        return self.fanout.position.seq
    }

    func update(configuration: Configuration, policy: AccessPolicy) {
        self.plane.update(configuration: configuration, policy: policy)
        self.pool.update(configuration: configuration)
    }
}

@available(*, unavailable)
extension Bridge: Sendable {}
