import Foundation
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
/// journal, the bridge, the local socket, the metrics endpoint, the monitor, the first connect,
/// READY=1 and the watchdog. Each step that opens something records it as a `DaemonPart` (how
/// it stops, and what a reload changes in it) in one list, in start order. A start that fails
/// stops what the list holds, latest first; SIGTERM stops the same list the same way.
extension DaemonService {
    /// A part of the running daemon, as its lifecycle sees it.
    struct DaemonPart: Sendable {
        var name: String
        var stop: @Sendable () async -> Void
        /// Applies a reloaded configuration; nil when a reload changes nothing in it.
        var reload: (@Sendable (Configuration, AccessPolicy) async throws -> Void)?
    }

    /// The parts started so far, in start order.
    struct Parts: Sendable {
        private(set) var started: [DaemonPart] = []

        mutating func add(
            _ name: String, reload: (@Sendable (Configuration, AccessPolicy) async throws -> Void)? = nil, stop: @escaping @Sendable () async -> Void
        ) {
            self.started.append(DaemonPart(name: name, stop: stop, reload: reload))
        }

        /// Stops every part, the last started first: after a failed start and at shutdown alike.
        func stop() async {
            for part in self.started.reversed() { await part.stop() }
        }

        /// Applies a reloaded configuration to every part that takes one, in start order.
        func reload(_ configuration: Configuration, policy: AccessPolicy) async throws {
            for part in self.started { try await part.reload?(configuration, policy) }
        }
    }

    func start(on eventLoop: any EventLoop) async throws -> Running {
        var parts = Parts()
        do {
            return try await self.start(on: eventLoop, &parts)
        } catch {
            let description = (error as? StartFailure)?.description ?? "\(error)"
            self.logger.critical("\(description)")
            Systemd.status(description)
            await parts.stop()
            Systemd.flush()
            throw error
        }
    }

    private func start(on eventLoop: any EventLoop, _ parts: inout Parts) async throws -> Running {
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
        var spool: (Spool, Spool.Restored)?
        var sticky: (StickyStore, [StickyRegistry.Entry])?
        if let directory = configuration.queue.spool {
            // The spool is read (and cleaned of a torn tail) before anything can be queued.
            let opened = try await Self.openLog {
                try Spool.open(directory: directory, fsync: configuration.queue.fsync, eventLoop: eventLoop, logger: logger)
            }
            spool = opened
            // What is still queued stays in the spool for the next start.
            parts.add("spool") { _ = try? await opened.0.close().get() }
            // Daemon-scope sticky keys live beside the spool, which created and locked the directory.
            sticky = try await Self.openLog { try StickyStore.open(spool: opened.0) }
        }
        var journal: (Journal, Journal.Recovered)?
        if configuration.journal.dir != nil {
            // Read back (a torn tail cut) before the first message is numbered: the stream and
            // seq go on from it.
            let opened = try await Self.openLog {
                try Journal.open(
                    configuration: configuration.journal, numberedElsewhere: configuration.fleet.isOn && configuration.fleet.role == .follower,
                    eventLoop: eventLoop, logger: logger)
            }
            journal = opened
            Self.logJournal(opened.0, opened.1, logger: logger)
            // It stops after the bridge, which hands it the last messages numbered: it writes
            // them, marks the clean stop after the last, and the next start goes on from there.
            parts.add("journal") { _ = try? await opened.0.close().get() }
        }
        // [fleet]: the NATS C client, loaded now so that a missing one fails the start.
        var nats: NATSLibrary?
        if configuration.fleet.isOn {
            switch NATSLibrary.load(configuration.fleet.library) {
            case .success(let loaded): nats = loaded
            case .failure(let error): throw StartFailure.fleet(error.description)
            }
        }
        let webSocketToken = try self.webSocketToken(configuration)
        let name = "wsbridged@\(ProcessInfo.processInfo.hostName)"
        let bridge = try await eventLoop.submit { [spool, sticky, journal, nats, webSocketToken] in
            NIOLoopBound(
                Bridge(
                    configuration: configuration, policy: policy, networkAvailable: networkAvailable, connectors: connectors, eventLoop: eventLoop,
                    logger: logger, spool: spool, sticky: sticky, journal: journal, nats: nats, holder: "\(name):\(getpid())",
                    webSocketToken: webSocketToken),
                eventLoop: eventLoop
            )
        }.get()
        let link = try await eventLoop.submit {
            UpstreamLinkHandle(
                link: NIOLoopBound(bridge.value.link, eventLoop: eventLoop), pool: NIOLoopBound(bridge.value.pool, eventLoop: eventLoop),
                eventLoop: eventLoop)
        }.get()
        let plane = try await eventLoop.submit { NIOLoopBound(bridge.value.plane, eventLoop: eventLoop) }.get()
        let follows = try await eventLoop.submit { bridge.value.follower != nil }.get()
        if follows {
            // A follower: its upstream is the stream. It stops after the bridge.
            try await eventLoop.submit { bridge.value.follower?.start(name: name) }.get()
            parts.add("fleet") { _ = try? await eventLoop.flatSubmit { bridge.value.follower?.stop() ?? eventLoop.makeSucceededVoidFuture() }.get() }
        } else if let fleet = try await eventLoop.submit({ bridge.value.publisher.map { NIOLoopBound($0, eventLoop: eventLoop) } }).get() {
            // [fleet]: what the fan-out numbers goes into the NATS JetStream stream too, and
            // followers' sends come here (wired with the bridge). It stops after the bridge,
            // which hands it the last messages numbered.
            try await eventLoop.submit { fleet.value.start(name: name) }.get()
            parts.add("fleet") {
                // After the bridge closed its upstream: what is in flight acknowledged, then a
                // leader releases its lease (a standby takes over at once), then NATS is closed.
                _ = try? await eventLoop.flatSubmit { fleet.value.stop() }.get()
            }
        }
        let journaled = journal?.0
        parts.add(
            "bridge",
            reload: { next, policy in try await eventLoop.submit { bridge.value.update(configuration: next, policy: policy) }.get() },
            stop: {
                // A follower's stream first: nothing is numbered after the seq the journal is told.
                _ = try? await eventLoop.flatSubmit { bridge.value.follower?.stop() ?? eventLoop.makeSucceededVoidFuture() }.get()
                // The upstream is closed (1001); subscribers get what is queued for them (as far
                // as their sockets take it), then EOF; what the fan-out numbered goes to the journal.
                _ = try? await link.shutdown().orTimeout(.seconds(5)).get()
                _ = try? await eventLoop.flatSubmit { bridge.value.plane.shutdown() }.orTimeout(.seconds(2)).get()
                let seq = try? await eventLoop.submit { bridge.value.flushNumbered() }.get()
                // Messages for one app (a protocol's routed ones) are numbered, not journaled:
                // the clean stop goes after the last seq numbered all the same.
                if let seq { journaled?.numbered(through: seq) }
            })

        let (channel, boundPath) = try await self.listen(configuration, eventLoop: eventLoop, plane: plane)
        parts.add("socket") {
            try? await channel.close()
            if let boundPath { unlink(boundPath) }
        }
        try await self.startWebSocketFace(configuration, eventLoop: eventLoop, plane: plane, parts: &parts)
        if let address = configuration.metrics.listen {
            let metrics: any Channel
            do {
                metrics = try await MetricsServer.start(configuration.metrics, address: address, eventLoop: eventLoop, plane: plane, logger: logger)
            } catch {
                throw StartFailure.metrics(address: "\(address)", cause: "\(error)")
            }
            parts.add("metrics") { try? await metrics.close() }
        }

        if let monitor, !follows {
            monitor.start(
                initial: networkAvailable,
                callbacks: .init(
                    changed: { available in link.networkChanged(available: available) },
                    touched: { link.checkLiveness(why: "network changed") },
                    resumed: { slept in link.checkLiveness(why: "resumed after \(slept.short) of suspend") }
                )
            )
            // A changed upstream or proxy host moves the route check.
            parts.add(
                "reachability", reload: { next, _ in monitor.update(hosts: ReachabilityMonitor.hosts(for: next, connectors: connectors)) },
                stop: { monitor.stop() })
        }
        logger.notice("wsbridged \(WSBridgeVersion.description) starting", metadata: ["upstream.url": "\(configuration.upstream.url)"])
        if follows {
            logger.notice("fleet.role = follower: the upstream is the JetStream stream \(configuration.fleet.stream)")
        } else if configuration.fleet.isOn && configuration.fleet.standby == .cold {
            logger.notice("fleet.standby = cold: the link opens once this bridge leads stream \(configuration.fleet.stream)")
        } else if configuration.upstream.connectOnStart {
            link.connect()
        } else {
            logger.notice("upstream.connect_on_start = false: the link stays closed until a connect request")
        }
        // Ready once the local socket listens; the upstream may still be connecting.
        try await eventLoop.submit { bridge.value.plane.postStatus() }.get()
        Systemd.notify("READY=1")

        // The watchdog is pinged from the event loop itself: a stuck loop stops the pings.
        if let interval = Systemd.watchdogPingInterval() {
            logger.info("systemd watchdog: pinging every \(interval.short)")
            let watchdog = eventLoop.scheduleRepeatedTask(initialDelay: .zero, delay: .nanoseconds(interval.nanoseconds)) { _ in
                Systemd.notify("WATCHDOG=1")
            }
            parts.add("watchdog") { watchdog.cancel() }
        }
        let running = Running(eventLoop: eventLoop, bridge: bridge, link: link, connectors: connectors, configuration: configuration, parts: parts)
        self.running.withLockedValue { $0 = running }
        self.settleStart(true)
        return running
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
            throw StartFailure.listen(socket: configuration.local.socket, cause: "\(error)")
        }
    }

    /// Opens a durable log on the thread pool (blocking file work); its error is a start failure.
    private static func openLog<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        do {
            return try await NIOThreadPool.singleton.runIfActive(body)
        } catch {
            throw StartFailure.durableLog("\(error)")
        }
    }
}
