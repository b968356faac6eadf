import Logging
import NIOCore
import NIOWebSocket
import WSBridgeCore
import WSBridgeProtocol

/// The local plane: admits clients (bounded by `local.max_clients`), greets them, routes their
/// requests (LocalPlane+Commands.swift) to the link and the fan-out, and tells them goodbye.
/// It is given the link's control interface and the fan-out at `init`; it reads the link's
/// state from the link, never from a copy. Confined to the link's event loop.
final class LocalPlane {
    let eventLoop: any EventLoop
    private(set) var configuration: Configuration
    /// `access.*`, its group names resolved off the loop.
    private var policy: AccessPolicy
    let logger: Logger
    let link: any LinkControl
    let fanout: Fanout
    /// `request`s waiting for their upstream message (the fan-out answers them).
    let pending: PendingRequests
    let metrics: DaemonMetrics
    /// The application protocol's layer on the link (nil: `raw`): apps' messages go through it.
    let appProtocol: AppProtocolLayer?
    /// Where apps' protocol messages go: each connection with its layer (LocalPlane+Protocol);
    /// nil with `raw`.
    let protocolMembers: (any ProtocolMembers)?
    /// The sticky keys (and the rest of the session the link restores on every open).
    let session: UpstreamSession
    /// `[fleet]` on a bridge: the publisher, whose own report is `status`'s `fleet`.
    let fleet: FleetPublisher?
    private let status: SystemdStatus
    let allocator = ByteBufferAllocator()
    /// Gives a lag's memory back once every lagging subscriber caught up.
    let memory: MemoryReturn
    private var nextClientID = 0
    /// Connections refused (over `local.max_clients`) since the last log line.
    private var refusedSinceLog = 0
    /// Clients refused at local.max_clients (or the reserved places) since the daemon started.
    private(set) var refusedClients: UInt64 = 0
    /// The service's own part of status (the last reload, the metrics endpoint), kept as it
    /// reports it.
    private(set) var service = StatusReport.Service()
    /// The WebSocket face's apps and connections (`LocalPlane+WebSocket`).
    var webSocket: WebSocketApps

    init(
        configuration: Configuration,
        policy: AccessPolicy,
        link: any LinkControl,
        fanout: Fanout,
        pending: PendingRequests,
        metrics: DaemonMetrics,
        appProtocol: AppProtocolLayer? = nil,
        protocolMembers: (any ProtocolMembers)? = nil,
        session: UpstreamSession,
        fleet: FleetPublisher? = nil,
        status: SystemdStatus,
        eventLoop: any EventLoop,
        logger: Logger,
        webSocketToken: String? = nil
    ) {
        self.webSocket = WebSocketApps(
            limits: configuration.local.webSocket, token: webSocketToken,
            face: configuration.applicationProtocol.kind == .raw ? nil : AppProtocolFace(configuration.applicationProtocol))
        self.configuration = configuration
        self.policy = policy
        self.link = link
        self.fanout = fanout
        if let face = self.webSocket.face { fanout.frames.opcode = face.binaryFrames ? .binary : .text }
        self.pending = pending
        self.metrics = metrics
        self.appProtocol = appProtocol
        self.protocolMembers = protocolMembers
        self.session = session
        self.fleet = fleet
        self.status = status
        self.eventLoop = eventLoop
        self.logger = logger
        self.memory = MemoryReturn(eventLoop: eventLoop, logger: logger)
    }

    /// Whether a peer may send upstream (root, the daemon's user, `access.write_*`), as of the
    /// last reload; unknown credentials may not.
    func mayWrite(_ credentials: PeerCredentials?, groups: Set<UInt32>) -> Bool {
        credentials?.mayWrite(self.policy, groups: groups) ?? false
    }

    /// A number for a new client of either face.
    func takeClientID() -> Int {
        self.nextClientID += 1
        return self.nextClientID
    }

    /// A client for a new connection; `credentials` nil means unknown (read-only).
    func makeClient(credentials: PeerCredentials?, groups: Set<UInt32>) -> LocalClient {
        LocalClient(
            id: self.takeClientID(),
            credentials: credentials,
            groups: groups,
            mayWrite: credentials?.mayWrite(self.policy, groups: groups) ?? false,
            plane: self,
            limits: self.configuration.local
        )
    }

    func update(configuration: Configuration, policy: AccessPolicy) {
        self.configuration = configuration
        self.policy = policy
        self.fanout.update(configuration: configuration.local)
        for client in self.fanout.allClients {
            client.update(limits: configuration.local, policy: policy)
        }
    }

    func reloaded(_ outcome: StatusReport.Reload) {
        self.service.lastReload = outcome
    }

    /// The HTTP metrics endpoint, once it listens (`metrics.listen`).
    func servingMetrics(at url: String) {
        self.service.metricsUrl = url
    }

    /// Sends STATUS= now, for READY=1 (it is also sent on every change). Called on the loop, as
    /// every change's is: a summary taken here and sent from elsewhere could arrive after a newer
    /// one (the link's phase changed in between) and leave `systemctl status` showing the old.
    func postStatus() { self.status.post(link: self.link, subscribers: self.subscribers) }

    /// Subscribers now, for the systemd status line.
    private var subscribers: Int { self.fanout.subscriberCount }

    /// Why the socket accepts no client now, while it does not.
    var notAccepting: String? { self.status.notAccepting }

    private func statusChanged() {
        self.status.update(link: self.link, subscribers: self.subscribers)
    }

    /// Tells every client the daemon is stopping, flushes what each can take, and closes them.
    func shutdown() -> EventLoopFuture<Void> {
        self.fanout.flush()
        let line = StateLine(state: .stopped, reason: "wsbridged is stopping", ts: WallClock.millisecondsSinceEpoch())
        let notice = MessageLineEncoder.line(line.json, allocator: self.allocator)
        // The link's own `stopped` state line normally went out already.
        let stopped = self.link.phase == .stopped
        let closed = self.fanout.allClients.compactMap { $0.finish(stopped ? nil : notice) }
        return EventLoopFuture.andAllComplete(closed, on: self.eventLoop)
    }

    // MARK: - Clients

    func added(_ client: LocalClient) {
        if let refusal = self.refusal(of: client) {
            let error = ProtocolError(.tooManyClients, refusal.reply)
            client.close(saying: MessageLineEncoder.line(error.reply, allocator: self.allocator))
            if self.refusedSinceLog == 0 {
                self.logger.warning("\(refusal.log)", metadata: ["local.max_clients": "\(self.configuration.local.maxClients)"])
            }
            self.refusedSinceLog += 1
            self.refusedClients += 1
            return
        }
        let limit = self.configuration.local.maxClients
        if self.refusedSinceLog > 0, self.fanout.clientCount < limit * 9 / 10 {
            self.logger.notice("accepting local clients again after refusing \(self.refusedSinceLog)")
            self.refusedSinceLog = 0
        }
        self.fanout.insert(client)
        let position = self.fanout.position
        let hello = Hello(state: self.link.phase, seq: position.seq, stream: position.stream, subscribed: client.subscribed, write: client.mayWrite)
        client.send(MessageLineEncoder.line(hello.json, allocator: self.allocator))
        self.statusChanged()
        self.logger.debug(
            "client connected",
            metadata: ["client.id": "\(client.id)", "client.uid": "\(client.credentials.map { String($0.uid) } ?? "?")", "client.write": "\(client.mayWrite)"]
        )
    }

    /// Why `client` may not connect now, if so: every place is taken, or only the reserved
    /// ones are left and it is not privileged (root, the daemon's own user, `access.write_*`).
    private func refusal(of client: LocalClient) -> (reply: String, log: String)? {
        let limit = self.configuration.local.maxClients
        let reserved = self.configuration.local.reserved
        let count = self.fanout.clientCount
        if count >= limit {
            return (
                "wsbridged already serves local.max_clients = \(limit) clients; close idle ones or raise local.max_clients",
                "refusing local clients: local.max_clients = \(limit) reached"
            )
        }
        guard !client.mayWrite, count >= limit - reserved else { return nil }
        return (
            "wsbridged serves \(count) clients and keeps the last local.reserved_clients = \(reserved) of local.max_clients = \(limit) places for root, its own user and access.write_uids / access.write_groups; close idle clients, or raise local.max_clients",
            "refusing unprivileged local clients: only the local.reserved_clients = \(reserved) places of local.max_clients = \(limit) are left"
        )
    }

    func removed(_ client: LocalClient) {
        guard self.fanout.remove(client) else { return }
        self.protocolAppLeft(client.id)
        self.releaseSticky(of: client)
        self.statusChanged()
        self.logger.debug("client disconnected", metadata: ["client.id": "\(client.id)"])
    }

    func setSubscription(_ client: LocalClient, subscribed: Bool, filter: Filter?, wire: Bool = false) {
        self.fanout.setSubscription(client, subscribed: subscribed, filter: filter, wire: wire)
        self.statusChanged()
    }

    func countDrops(_ n: Int) {
        self.fanout.countDrops(n)
    }

    /// Closes a client that broke a bound, with a last line and a log line saying why.
    func disconnect(_ client: LocalClient, because reason: String) {
        self.logger.warning("disconnecting local client: \(reason)", metadata: ["client.id": "\(client.id)"])
        let error = ProtocolError(.outputNotRead, "disconnected: \(reason); read what the daemon sends")
        client.close(saying: MessageLineEncoder.line(error.reply, allocator: self.allocator))
    }

    /// accept(2) failed (out of file descriptors, most often), the first time since clients were
    /// last accepted. Returns how long the listener pauses before each new try.
    func acceptFailed(_ error: IOError) -> TimeAmount {
        let reason = "\(error); retrying every 200 ms. Raise LimitNOFILE= or lower local.max_clients (\(self.configuration.local.maxClients))"
        self.logger.error("cannot accept local clients: \(reason)")
        self.status.accepting(failed: reason, link: self.link, subscribers: self.subscribers)
        return .milliseconds(200)
    }

    func acceptRecovered() {
        self.logger.notice("accepting local clients again")
        self.status.accepting(failed: nil, link: self.link, subscribers: self.subscribers)
    }
}

@available(*, unavailable)
extension LocalPlane: Sendable {}
