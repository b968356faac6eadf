import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

extension Bridge {
    // `[fleet]` on a bridge (docs/fleet.md): what the fan-out numbers goes into the NATS
    // JetStream stream too (the publisher is the fan-out's tap, given at its init, with the
    // journal it reads back from when memory is past its bound); followers' sends come to the
    // plane; followers' apps are held by the protocol layer as this host's; followers' sticky keys
    // of no protocol id are held here for them; the lease (`standBy`). Built with the bridge,
    // before anything starts; `start` connects it.

    /// The publisher's parts that reach the plane, the layer and the link (once they are built).
    func wire(_ publisher: FleetPublisher, _ configuration: Configuration, holder: String, eventLoop: any EventLoop, logger: Logger) {
        let plane = self.plane
        publisher.serve = { message, app, request, mirror in plane.fromFollower(message, app: app, request, mirror: mirror) }
        if self.appProtocol != nil {
            // Followers' apps, held by the protocol layer as apps of this host's.
            publisher.remoteApps.left = { app in plane.protocolAppLeft(app) }
            publisher.remoteApps.start(on: eventLoop, logger: logger)
        }
        // Followers' sticky keys of no protocol id, held here for them (a follower of another
        // protocol than this bridge's is told no, as its sends are).
        let holders = FleetStickyHolders(
            session: self.session, link: plane.link, protocol: self.appProtocol?.session.name, eventLoop: eventLoop, logger: logger)
        publisher.stickySet = { holder, set, theirs in holders.apply(holder, set, protocol: theirs) }
        Self.standBy(configuration, publisher: publisher, link: plane.link, holder: holder, logger: logger)
    }

    /// `fleet.standby` (docs/fleet.md): the lease that says which bridge leads. With `cold` the
    /// leader alone holds the upstream: it opens the link when it takes over (after a message in
    /// the stream that tells the followers of the gap) and closes it when it learns another bridge
    /// leads. With `hot` every bridge holds the upstream and publishes, each message under an id
    /// taken from it (`upstream.dedupe`), and the leader answers the followers' sends.
    static func standBy(_ configuration: Configuration, publisher: FleetPublisher, link: any LinkControl, holder: String, logger: Logger) {
        let fleet = configuration.fleet
        guard fleet.standby != .none else { return }
        let lease = FleetLease(fleet: fleet, library: publisher.library, holder: holder, eventLoop: publisher.eventLoop, logger: logger)
        publisher.lease = lease
        if fleet.standby == .hot {
            publisher.idPaths = configuration.upstream.dedupe.map { JSONPathScan.Path(JSONValue.PathComponent.split($0)) }
            return
        }
        // A leader publishes what it holds once its lease is written again after NATS came back.
        lease.confirmed = { publisher.pump() }
        lease.changed = { [weak lease] change in
            switch change {
            case .stoppedLeading(let holder):
                // Another bridge's name in the lease: it publishes from now on, and what this one
                // still holds would land after its takeover, out of order.
                publisher.standDown(for: holder)
                link.close(code: 1001, reason: "standing by: the fleet's lease is \(holder)'s")
            case .startedLeading(nil):
                link.connect()
            case .startedLeading(let previous?):
                publisher.announceTakeover(leader: holder, previous: previous).assumeIsolated().whenComplete { result in
                    if case .failure(let error) = result { logger.error("fleet: \(error); connecting all the same") }
                    guard lease?.leading == true else { return }
                    link.connect()
                }
            }
        }
    }
}
