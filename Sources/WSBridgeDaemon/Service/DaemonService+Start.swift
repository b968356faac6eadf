import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import WSBridgeCore
import WSBridgeProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// The start, in steps: the network check and access policy, the spool, the sticky store, the
/// bridge, the local socket, the metrics endpoint, then the monitor, the first connect and
/// READY=1. Whatever a step opened is recorded in a `Startup`; when a later step fails, that
/// is undone in one place, latest first, and the failure is logged and told to systemd once.
extension DaemonService {
    struct ServerHandle: Sendable {
        var channel: any Channel
        /// The path this process bound (and so removes when it stops); nil when systemd passed it.
        var boundPath: String?
        var running: Running
        /// The HTTP metrics endpoint, when `metrics.listen` is set.
        var metrics: (any Channel)?
    }

    /// What the start has opened so far.
    struct Startup: Sendable {
        var spool: (Spool, Spool.Restored)?
        var sticky: (StickyStore, [StickyRegistry.Entry])?
        var journal: (Journal, Journal.Recovered)?
        var link: UpstreamLinkHandle?
        var channel: (any Channel)?
        var boundPath: String?
        var metrics: (any Channel)?

        /// Undoes the start, latest step first.
        func rollBack() async {
            try? await self.metrics?.close()
            try? await self.channel?.close()
            if let path = self.boundPath { unlink(path) }
            // The link never connected; stopping it settles its promises before it goes.
            if let link = self.link { _ = try? await link.shutdown().get() }
            if let spool = self.spool?.0 { _ = try? await spool.close().get() }
            // Nothing was numbered: the journal stops cleanly where it was.
            if let (journal, recovered) = self.journal { _ = try? await journal.close(lastSeq: recovered.lastSeq).get() }
        }
    }

    func start(on eventLoop: any EventLoop) async throws -> ServerHandle {
        var startup = Startup()
        do {
            return try await self.start(on: eventLoop, &startup)
        } catch {
            let description = (error as? StartFailure)?.description ?? "\(error)"
            self.logger.critical("\(description)")
            Systemd.status(description)
            await startup.rollBack()
            Systemd.flush()
            throw error
        }
    }

    private func start(on eventLoop: any EventLoop, _ startup: inout Startup) async throws -> ServerHandle {
        let configuration = self.initial
        let logger = self.logger
        let connectors = self.connectors
        let monitor =
            configuration.reachability.enabled
            ? ReachabilityMonitor(
                hosts: ReachabilityMonitor.hosts(for: configuration, connectors: connectors), pollInterval: configuration.reachability.pollInterval,
                logger: logger) : nil
        // Name resolution and NSS lookups block: done on the thread pool, not on the loop.
        let (networkAvailable, policy) = try await NIOThreadPool.singleton.runIfActive {
            (monitor?.routeExists() ?? true, Self.resolvePolicy(configuration.access, logger: logger))
        }
        if let directory = configuration.queue.spool {
            // The spool is read (and cleaned of a torn tail) before anything can be queued.
            startup.spool = try await Self.blocking(exitCode: 73) {  // EX_CANTCREAT
                try Spool.open(directory: directory, fsync: configuration.queue.fsync, eventLoop: eventLoop, logger: logger)
            }
            // Daemon-scope sticky keys live beside the spool, which created and locked the directory.
            let spool = startup.spool!.0
            startup.sticky = try await Self.blocking(exitCode: 73) { try StickyStore.open(spool: spool) }
        }
        if configuration.journal.dir != nil {
            // Read back (a torn tail cut) before the first message is numbered: the stream and
            // seq go on from it.
            startup.journal = try await Self.blocking(exitCode: 73) {  // EX_CANTCREAT
                try Journal.open(configuration: configuration.journal, eventLoop: eventLoop, logger: logger)
            }
            if let (journal, recovered) = startup.journal {
                Self.logJournal(journal, recovered, logger: logger)
            }
        }
        let (spool, sticky, journal) = (startup.spool, startup.sticky, startup.journal)
        let bridge = try await eventLoop.submit {
            NIOLoopBound(
                Bridge(
                    configuration: configuration, policy: policy, networkAvailable: networkAvailable, connectors: connectors, eventLoop: eventLoop,
                    logger: logger, spool: spool, sticky: sticky, journal: journal),
                eventLoop: eventLoop
            )
        }.get()
        let link = try await eventLoop.submit { UpstreamLinkHandle(link: NIOLoopBound(bridge.value.link, eventLoop: eventLoop), eventLoop: eventLoop) }.get()
        startup.link = link
        let plane = try await eventLoop.submit { NIOLoopBound(bridge.value.plane, eventLoop: eventLoop) }.get()

        let (channel, boundPath) = try await self.listen(configuration, eventLoop: eventLoop, plane: plane)
        startup.channel = channel
        startup.boundPath = boundPath
        if let address = configuration.metrics.listen {
            do {
                startup.metrics = try await MetricsServer.start(configuration.metrics, address: address, eventLoop: eventLoop, plane: plane, logger: logger)
            } catch {
                throw StartFailure(
                    exitCode: 69,  // EX_UNAVAILABLE
                    description: "cannot serve metrics on \(address) (metrics.listen): \(error); choose a free local address, or leave metrics.listen empty")
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
        logger.notice("wsbridged \(WSBridgeVersion.description) starting", metadata: ["upstream.url": "\(configuration.upstream.url)"])
        if configuration.upstream.connectOnStart {
            link.connect()
        } else {
            logger.notice("upstream.connect_on_start = false: the link stays closed until a connect request")
        }
        // Ready once the local socket listens; the upstream may still be connecting.
        let status = try await eventLoop.submit { bridge.value.plane.statusSummary }.get()
        Systemd.status(status)
        Systemd.notify("READY=1")

        // The watchdog is pinged from the event loop itself: a stuck loop stops the pings.
        var watchdog: RepeatedTask?
        if let interval = Systemd.watchdogPingInterval() {
            logger.info("systemd watchdog: pinging every \(interval.short)")
            watchdog = eventLoop.scheduleRepeatedTask(initialDelay: .zero, delay: .nanoseconds(interval.nanoseconds)) { _ in
                Systemd.notify("WATCHDOG=1")
            }
        }
        let running = Running(
            eventLoop: eventLoop, bridge: bridge, link: link, monitor: monitor, connectors: connectors, configuration: configuration,
            spool: spool?.0, journal: journal?.0, watchdog: watchdog)
        self.running.withLockedValue { $0 = running }
        self.settleStart(true)
        return ServerHandle(channel: channel, boundPath: boundPath, running: running, metrics: startup.metrics)
    }

    private static func logJournal(_ journal: Journal, _ recovered: Journal.Recovered, logger: Logger) {
        let stats = journal.statistics
        let kept = stats.oldestSeq.map { "seq \($0)...\(stats.newestSeq ?? $0)" } ?? "no message yet"
        if recovered.clean {
            logger.notice(
                "journal: \(journal.directory) keeps \(kept) in \(stats.segments) segment(s), \(stats.bytes) bytes; stream \(journal.streamID) goes on at seq \(recovered.lastSeq + 1)",
                metadata: ["journal.stream": "\(journal.streamID)"])
        } else {
            let previous = recovered.previousStream.map(Journal.streamID) ?? "?"
            logger.warning(
                "journal: the last run stopped without a clean shutdown (a crash or kill -9): what stream \(previous) numbered after seq \(recovered.lastSeq) is not in \(journal.directory); this run counts on in the new stream \(journal.streamID) from seq \(recovered.lastSeq + 1), and consumers resuming in the old one are told (gap not_durable)",
                metadata: ["journal.stream": "\(journal.streamID)"])
        }
    }

    /// Socket activation: adopts the socket systemd passes, else binds the configured path
    /// (returned as the path to remove at the end; nil for systemd's socket).
    private func listen(
        _ configuration: Configuration, eventLoop: any EventLoop, plane: NIOLoopBound<LocalPlane>
    ) async throws -> (any Channel, String?) {
        let activated = Systemd.listenedSockets()
        do {
            if let socket = activated.first {
                if activated.count > 1 {
                    self.logger.warning("systemd passed \(activated.count) sockets; using the first (\(socket.name)) and ignoring the rest")
                }
                let channel = try await LocalServer.start(
                    path: configuration.local.socket, adoptingFD: socket.fd, configuration: configuration, eventLoop: eventLoop, plane: plane,
                    groups: GroupCache(), logger: self.logger)
                self.logger.notice("listening on the socket passed by systemd", metadata: ["local.fdname": "\(socket.name)"])
                return (channel, nil)
            }
            let channel = try await LocalServer.start(
                path: configuration.local.socket, configuration: configuration, eventLoop: eventLoop, plane: plane, groups: GroupCache(),
                logger: self.logger)
            return (channel, configuration.local.socket)
        } catch {
            throw StartFailure(exitCode: 69, description: "cannot listen on \(configuration.local.socket): \(error)")  // EX_UNAVAILABLE
        }
    }

    /// Runs blocking file work on the thread pool; its error is a start failure with `exitCode`.
    private static func blocking<T: Sendable>(exitCode: Int32, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        do {
            return try await NIOThreadPool.singleton.runIfActive(body)
        } catch {
            throw StartFailure(exitCode: exitCode, description: "\(error)")
        }
    }
}
