import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import ServiceLifecycle
import UnixSignals
import WSBridgeCore
import WSBridgeProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// wsbridged as a ServiceLifecycle `Service`: starts the bridge and the local socket, tells
/// systemd it is ready, reloads on SIGHUP (through ServiceLifecycle's `UnixSignalsSequence`) or
/// `reload()`, and on graceful shutdown (SIGTERM/SIGINT, handled by the `ServiceGroup`) closes
/// the upstream with 1001, flushes every subscriber and removes its socket.
public final class DaemonService: Service, Sendable {
    /// What `--check-config` checks beyond the file itself: the TLS files load (a missing
    /// tls.ca_file must not pass the check and fail at the first connection).
    public static func checkFiles(_ configuration: Configuration) throws {
        try ConnectorFactory.check(configuration)
    }

    /// The daemon could not start; `exitCode` is what the process should exit with.
    public struct StartFailure: Error, CustomStringConvertible {
        public var exitCode: Int32
        public var description: String
    }

    private let initial: Configuration
    let environment: [String: String]
    let logger: Logger
    let load: @Sendable () throws -> Configuration
    let running = NIOLockedValueBox<Running?>(nil)
    /// Whether the start succeeded (nil while starting), and who waits to know.
    private let started = NIOLockedValueBox<(outcome: Bool?, waiters: [CheckedContinuation<Bool, Never>])>((nil, []))

    /// The live parts, once started.
    struct Running: Sendable {
        var eventLoop: any EventLoop
        var bridge: NIOLoopBound<Bridge>
        var link: UpstreamLinkHandle
        var monitor: ReachabilityMonitor?
        var connectors: ConnectorFactory
        var configuration: Configuration
        /// The durable outbound spool, when `queue.spool` is set.
        var spool: Spool?
    }

    /// `load` re-reads the configuration for a reload; a failure keeps the running one.
    public init(configuration: Configuration, environment: [String: String], logger: Logger, load: @escaping @Sendable () throws -> Configuration) {
        self.initial = configuration
        self.environment = environment
        self.logger = logger
        self.load = load
    }

    /// Blocks the signals the daemon handles, in every thread it will start. Call first in main:
    /// they are then delivered only through ServiceLifecycle's signal sequences.
    public static func blockSignals() {
        var set = sigset_t()
        sigemptyset(&set)
        for s in [SIGTERM, SIGINT, SIGHUP] { sigaddset(&set, s) }
        pthread_sigmask(SIG_BLOCK, &set, nil)
        signal(SIGPIPE, SIG_IGN)
    }

    public func run() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        // Trapped before READY=1, so a reload request right after it is not lost.
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        let server: ServerHandle
        do {
            server = try await self.start(on: group.next())
        } catch {
            self.settleStart(false)
            try? await group.shutdownGracefully()
            throw error
        }
        for await _ in hangups.cancelOnGracefulShutdown() {
            await self.reload()
        }
        await self.stop(server)
        try? await group.shutdownGracefully()
    }

    /// Waits until the daemon listens and is ready (true), or its start failed (false).
    @discardableResult
    public func waitUntilStarted() async -> Bool {
        await withCheckedContinuation { continuation in
            let outcome = self.started.withLockedValue { state -> Bool? in
                if state.outcome == nil { state.waiters.append(continuation) }
                return state.outcome
            }
            if let outcome { continuation.resume(returning: outcome) }
        }
    }

    private func settleStart(_ outcome: Bool) {
        let waiters = self.started.withLockedValue { state -> [CheckedContinuation<Bool, Never>] in
            state.outcome = outcome
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(returning: outcome) }
    }

    // MARK: - Start

    private struct ServerHandle: Sendable {
        var channel: any Channel
        /// The path this process bound (and so removes when it stops); nil when systemd passed it.
        var boundPath: String?
        var running: Running
        /// The HTTP metrics endpoint, when `metrics.listen` is set.
        var metrics: (any Channel)?
    }

    private func start(on eventLoop: any EventLoop) async throws -> ServerHandle {
        let configuration = self.initial
        let logger = self.logger
        let environment = self.environment
        let monitor =
            configuration.reachability.enabled
            ? ReachabilityMonitor(
                hosts: ReachabilityMonitor.hosts(for: configuration, environment: environment), pollInterval: configuration.reachability.pollInterval,
                logger: logger) : nil
        // Name resolution and NSS lookups block: done on the thread pool, not on the loop.
        let (networkAvailable, policy) = try await NIOThreadPool.singleton.runIfActive {
            (monitor?.routeExists() ?? true, Self.resolvePolicy(configuration.access, logger: logger))
        }
        // The spool is read (and cleaned of a torn tail) before anything can be queued.
        var spool: (Spool, Spool.Restored)?
        if let directory = configuration.queue.spool {
            do {
                spool = try await NIOThreadPool.singleton.runIfActive {
                    try Spool.open(directory: directory, fsync: configuration.queue.fsync, eventLoop: eventLoop, logger: logger)
                }
            } catch {
                logger.critical("\(error)")
                Systemd.notify("STATUS=\(error)")
                throw StartFailure(exitCode: 73, description: "\(error)")  // EX_CANTCREAT
            }
        }
        let openedSpool = spool
        // Daemon-scope sticky keys live beside the spool, which created and locked the directory.
        var sticky: (StickyStore, [StickyRegistry.Entry])?
        if let directory = configuration.queue.spool {
            do {
                sticky = try await NIOThreadPool.singleton.runIfActive { try StickyStore.open(directory: directory) }
            } catch {
                logger.critical("\(error)")
                Systemd.notify("STATUS=\(error)")
                if let s = openedSpool?.0 { _ = try? await s.close().get() }
                throw StartFailure(exitCode: 73, description: "\(error)")  // EX_CANTCREAT
            }
        }
        let openedSticky = sticky
        let connectors = ConnectorFactory()
        let bridge = try await eventLoop.submit {
            NIOLoopBound(
                Bridge(
                    configuration: configuration,
                    policy: policy,
                    networkAvailable: networkAvailable,
                    environment: environment,
                    connectors: connectors,
                    eventLoop: eventLoop,
                    logger: logger,
                    spool: openedSpool,
                    sticky: openedSticky
                ),
                eventLoop: eventLoop
            )
        }.get()
        let link = try await eventLoop.submit { UpstreamLinkHandle(link: NIOLoopBound(bridge.value.link, eventLoop: eventLoop), eventLoop: eventLoop) }.get()
        let plane = try await eventLoop.submit { NIOLoopBound(bridge.value.plane, eventLoop: eventLoop) }.get()

        // Socket activation: adopt the socket systemd passes, else bind the configured path.
        let activated = Systemd.listenedSockets()
        let channel: any Channel
        do {
            if let socket = activated.first {
                if activated.count > 1 {
                    logger.warning("systemd passed \(activated.count) sockets; using the first (\(socket.name)) and ignoring the rest")
                }
                channel = try await LocalServer.start(
                    path: configuration.local.socket,
                    adoptingFD: socket.fd,
                    configuration: configuration,
                    eventLoop: eventLoop,
                    plane: plane,
                    groups: GroupCache(),
                    logger: logger
                )
                logger.notice("listening on the socket passed by systemd", metadata: ["local.fdname": "\(socket.name)"])
            } else {
                channel = try await LocalServer.start(
                    path: configuration.local.socket,
                    configuration: configuration,
                    eventLoop: eventLoop,
                    plane: plane,
                    groups: GroupCache(),
                    logger: logger
                )
            }
        } catch {
            logger.critical("cannot listen on the local socket: \(error)")
            // The link never connected; stopping it settles its promises before it goes.
            _ = try? await link.shutdown().get()
            if let s = openedSpool?.0 { _ = try? await s.close().get() }
            openedSticky?.0.close()
            Systemd.notify("STATUS=cannot listen on \(configuration.local.socket): \(error)")
            throw StartFailure(exitCode: 69, description: "cannot listen on \(configuration.local.socket): \(error)")  // EX_UNAVAILABLE
        }
        var metricsChannel: (any Channel)?
        if let address = configuration.metrics.listen {
            do {
                metricsChannel = try await MetricsServer.start(configuration.metrics, address: address, eventLoop: eventLoop, plane: plane, logger: logger)
            } catch {
                let problem = "cannot serve metrics on \(address) (metrics.listen): \(error); choose a free local address, or leave metrics.listen empty"
                logger.critical("\(problem)")
                _ = try? await link.shutdown().get()
                if let s = openedSpool?.0 { _ = try? await s.close().get() }
                openedSticky?.0.close()
                try? await channel.close()
                if activated.isEmpty { unlink(configuration.local.socket) }
                Systemd.notify("STATUS=\(problem)")
                throw StartFailure(exitCode: 69, description: problem)
            }
        }

        monitor?.start(
            initial: networkAvailable,
            callbacks: .init(
                changed: { available in link.networkChanged(available: available) },
                touched: { link.checkLiveness(why: "network changed") },
                resumed: { slept in link.checkLiveness(why: "resumed after \(slept.short) of suspend") }
            )
        )
        logger.notice("wsbridged \(WSBridgeVersion.current) starting", metadata: ["upstream.url": "\(configuration.upstream.url)"])
        if configuration.upstream.connectOnStart {
            link.connect()
        } else {
            logger.notice("upstream.connect_on_start = false: the link stays closed until a connect request")
        }
        // Ready once the local socket listens; the upstream may still be connecting.
        let status = try await eventLoop.submit { bridge.value.plane.statusSummary }.get()
        Systemd.notify("READY=1\nSTATUS=\(status)")

        // The watchdog is pinged from the event loop itself: a stuck loop stops the pings.
        if let interval = Systemd.watchdogPingInterval() {
            logger.info("systemd watchdog: pinging every \(interval.short)")
            _ = eventLoop.scheduleRepeatedTask(initialDelay: .zero, delay: .nanoseconds(interval.nanoseconds)) { _ in
                Systemd.notify("WATCHDOG=1")
            }
        }
        let running = Running(
            eventLoop: eventLoop,
            bridge: bridge,
            link: link,
            monitor: monitor,
            connectors: connectors,
            configuration: configuration,
            spool: openedSpool?.0
        )
        self.running.withLockedValue { $0 = running }
        self.settleStart(true)
        return ServerHandle(channel: channel, boundPath: activated.isEmpty ? configuration.local.socket : nil, running: running, metrics: metricsChannel)
    }

    static func resolvePolicy(_ access: Configuration.Access, logger: Logger) -> AccessPolicy {
        let (policy, unknown) = AccessPolicy.resolve(access)
        if !unknown.isEmpty {
            logger.warning("access.write_groups: no such group \(unknown.joined(separator: ", ")); its members get read-only access")
        }
        return policy
    }

    // MARK: - Stop

    private func stop(_ server: ServerHandle) async {
        let running = server.running
        self.logger.notice("stopping: closing the upstream (1001)")
        Systemd.notify("STOPPING=1\nSTATUS=stopping")
        let eventLoop = running.eventLoop
        let stopped = running.link.shutdown()
        let timeout = eventLoop.scheduleTask(in: .seconds(5)) {}
        _ = try? await stopped.or(timeout.futureResult).get()
        // Subscribers get what is queued for them (as far as their sockets take it), then EOF.
        let bridge = running.bridge
        let flushed = eventLoop.flatSubmit { bridge.value.plane.shutdown() }
        let flushTimeout = eventLoop.scheduleTask(in: .seconds(2)) {}
        _ = try? await flushed.or(flushTimeout.futureResult).get()
        try? await server.channel.close()
        try? await server.metrics?.close()
        if let path = server.boundPath { unlink(path) }
        running.monitor?.stop()
        // What is still queued stays in the spool for the next start.
        if let spool = running.spool { _ = try? await spool.close().get() }
        _ = try? await eventLoop.submit { bridge.value.session.close() }.get()
        self.running.withLockedValue { $0 = nil }
        self.logger.notice("stopped")
    }
}

extension EventLoopFuture where Value == Void {
    /// Completes when either future completes.
    func or(_ other: EventLoopFuture<Void>) -> EventLoopFuture<Void> {
        let promise = self.eventLoop.makePromise(of: Void.self)
        self.whenComplete { _ in promise.succeed(()) }
        other.hop(to: self.eventLoop).whenComplete { _ in promise.succeed(()) }
        return promise.futureResult
    }
}
