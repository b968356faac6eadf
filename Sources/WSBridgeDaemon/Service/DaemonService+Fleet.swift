import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

extension DaemonService {
    /// `fleet.standby` (docs/fleet.md): the lease that says which bridge leads. With `cold` the
    /// leader alone holds the upstream: it opens the link when it takes over (after a message in
    /// the stream that tells the followers of the gap) and closes it when it learns another bridge
    /// leads. With `hot` every bridge holds the upstream and publishes, each message under an id
    /// taken from it (`upstream.dedupe`), and the leader answers the followers' sends.
    static func standBy(_ configuration: Configuration, publisher: FleetPublisher, bridge: Bridge, holder: String, logger: Logger) {
        let fleet = configuration.fleet
        guard fleet.standby != .none else { return }
        let lease = FleetLease(fleet: fleet, library: publisher.library, holder: holder, eventLoop: publisher.eventLoop, logger: logger)
        publisher.lease = lease
        if fleet.standby == .hot {
            publisher.idPaths = configuration.upstream.dedupe.map { JSONPathScan.Path(JSONValue.PathComponent.split($0)) }
            return
        }
        let link = bridge.plane.link
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
