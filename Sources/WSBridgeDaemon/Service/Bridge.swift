import Logging
import NIOCore
import WSBridgeCore

/// The daemon's parts on one event loop, built in dependency order and with no cycles:
///
///     Fanout  <-(events)-  UpstreamLink  <-(LinkControl)-  LocalPlane -> Fanout
///                               |                         |
///                               +----> UpstreamSession <--+
///
/// The fan-out is the link's event sink; the link knows nothing else of the plane; the plane
/// is given the link's control interface and the fan-out at `init`. Confined to the loop.
final class Bridge {
    let link: UpstreamLink
    let plane: LocalPlane
    let fanout: Fanout
    let session: UpstreamSession
    let metrics: DaemonMetrics

    init(
        configuration: Configuration,
        policy: AccessPolicy,
        networkAvailable: Bool,
        connectors: ConnectorFactory,
        eventLoop: any EventLoop,
        logger: Logger,
        spool: (Spool, Spool.Restored)? = nil,
        sticky: (StickyStore, [StickyRegistry.Entry])? = nil,
        journal: (Journal, Journal.Recovered)? = nil
    ) {
        let status = SystemdStatus()
        let metrics = DaemonMetrics()
        self.metrics = metrics
        self.fanout = Fanout(configuration: configuration.local, status: status, metrics: metrics, eventLoop: eventLoop, journal: journal)
        self.fanout.install(
            makeProtocolRouter(
                configuration.applicationProtocol, maxMessageSize: configuration.upstream.maxMessageSize))
        self.fanout.logger = logger
        self.session = UpstreamSession(
            configuration: configuration, store: sticky?.0, restored: sticky?.1 ?? [], eventLoop: eventLoop, logger: logger)
        self.link = UpstreamLink(
            configuration: configuration,
            networkAvailable: networkAvailable,
            eventLoop: eventLoop,
            logger: logger,
            connectors: connectors,
            events: self.fanout,
            metrics: metrics,
            spool: spool,
            session: self.session
        )
        self.plane = LocalPlane(
            configuration: configuration,
            policy: policy,
            link: self.link,
            fanout: self.fanout,
            session: self.session,
            status: status,
            eventLoop: eventLoop,
            logger: logger
        )
    }

    func update(configuration: Configuration, policy: AccessPolicy) {
        self.plane.update(configuration: configuration, policy: policy)
        self.link.update(configuration: configuration)
    }
}

@available(*, unavailable)
extension Bridge: Sendable {}
