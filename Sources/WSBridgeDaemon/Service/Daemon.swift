import Logging
import NIOCore
import NIOPosix
import WSBridgeCore
import WSBridgeProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Assembles and runs the daemon: the local plane and the upstream link on one event loop, the
/// reachability monitor, and the process lifecycle under systemd (readiness, status, watchdog,
/// socket activation, SIGHUP reload, SIGTERM stop).
public enum Daemon {
    /// Blocks the signals the daemon handles, in every thread it will start. Call first in main.
    public static func blockSignals() {
        var set = Self.handledSignals()
        pthread_sigmask(SIG_BLOCK, &set, nil)
        signal(SIGPIPE, SIG_IGN)
    }

    static func handledSignals() -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for s in [SIGTERM, SIGINT, SIGHUP] { sigaddset(&set, s) }
        return set
    }

    /// Runs until SIGTERM or SIGINT. `reload` re-reads the configuration (SIGHUP).
    /// Returns the process exit code.
    public static func run(
        configuration initial: Configuration,
        environment: [String: String],
        logger: Logger,
        reload: () throws -> Configuration
    ) -> Int32 {
        let initialConfiguration = initial
        var configuration = initial
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { try? group.syncShutdownGracefully() }
        let eventLoop = group.next()

        let upstream = configuration.upstream.url
        let reachHost = UpstreamConnector.proxy(for: configuration, environment: environment)?.host ?? upstream.host
        let monitor = ReachabilityMonitor(host: reachHost, pollInterval: configuration.reachability.pollInterval, logger: logger)
        let networkAvailable = configuration.reachability.enabled ? monitor.routeExists() : true

        let plane: NIOLoopBound<LocalPlane>
        let link: UpstreamLinkHandle
        do {
            plane = try eventLoop.submit {
                NIOLoopBound(LocalPlane(configuration: initialConfiguration, eventLoop: eventLoop, logger: logger), eventLoop: eventLoop)
            }.wait()
            link = try UpstreamLinkHandle.make(
                configuration: configuration,
                networkAvailable: networkAvailable,
                environment: environment,
                eventLoop: eventLoop,
                logger: logger,
                onEvent: { event in
                    plane.value.handle(event)
                    switch event {
                    case .message(let message):
                        logger.trace("message \(message.kind == .text ? "text" : "binary") \(message.data.readableBytes) bytes: \(Self.preview(message))")
                    case .roundTrip(let rtt):
                        logger.debug("heartbeat rtt \(rtt.short)")
                    case .state, .attempt, .retryScheduled:
                        break
                    }
                }
            ).wait()
            try eventLoop.submit {
                plane.value.link = link.link.value
                // STATUS= follows state, RTT and subscriber changes; it is sent only when it changed.
                var lastStatus = ""
                plane.value.statusChanged = {
                    let status = plane.value.statusSummary()
                    if status != lastStatus {
                        lastStatus = status
                        Systemd.notify("STATUS=\(status)")
                    }
                }
            }.wait()
        } catch {
            logger.critical("cannot start: \(error)")
            return 1
        }

        // Socket activation: adopt the socket systemd passes, else bind the configured path.
        let activated = Systemd.listenedSockets()
        // The path this process binds, and so removes when it stops: a reload that changes
        // local.socket applies only after a restart, and the new path may be another daemon's.
        let boundSocket = initialConfiguration.local.socket
        let server: any Channel
        do {
            if let socket = activated.first {
                if activated.count > 1 {
                    logger.warning("systemd passed \(activated.count) sockets; using the first (\(socket.name)) and ignoring the rest")
                }
                server = try LocalServer.start(
                    path: configuration.local.socket,
                    adoptingFD: socket.fd,
                    configuration: configuration,
                    eventLoop: eventLoop,
                    plane: plane,
                    logger: logger
                )
                logger.notice("listening on the socket passed by systemd", metadata: ["local.fdname": "\(socket.name)"])
            } else {
                server = try LocalServer.start(
                    path: configuration.local.socket,
                    configuration: configuration,
                    eventLoop: eventLoop,
                    plane: plane,
                    logger: logger
                )
            }
        } catch {
            logger.critical("cannot listen on the local socket: \(error)")
            Systemd.notify("STATUS=cannot listen on \(configuration.local.socket): \(error)")
            return 69  // EX_UNAVAILABLE
        }

        if configuration.reachability.enabled {
            monitor.start(
                initial: networkAvailable,
                callbacks: .init(
                    changed: { available in link.networkChanged(available: available) },
                    touched: { link.checkLiveness(why: "network changed") },
                    resumed: { slept in link.checkLiveness(why: "resumed after \(slept.short) of suspend") }
                )
            )
        }
        logger.notice("wsbridged \(WSBridgeVersion.current) starting", metadata: ["upstream.url": "\(upstream)"])
        if configuration.upstream.connectOnStart {
            link.connect()
        } else {
            logger.notice("upstream.connect_on_start = false: the link stays closed until a connect request")
        }
        // Ready once the local socket listens; the upstream may still be connecting.
        let status = (try? eventLoop.submit { plane.value.statusSummary() }.wait()) ?? ""
        Systemd.notify("READY=1\nSTATUS=\(status)")

        // The watchdog is pinged from the event loop itself: a stuck loop stops the pings.
        if let interval = Systemd.watchdogPingInterval() {
            logger.info("systemd watchdog: pinging every \(interval.short)")
            _ = eventLoop.scheduleRepeatedTask(initialDelay: .zero, delay: .nanoseconds(interval.nanoseconds)) { _ in
                Systemd.notify("WATCHDOG=1")
            }
        }

        var set = Self.handledSignals()
        while true {
            var signal: Int32 = 0
            guard sigwait(&set, &signal) == 0 else { continue }
            if signal == SIGHUP {
                Systemd.notify("RELOADING=1\nMONOTONIC_USEC=\(Systemd.monotonicMicroseconds())")
                do {
                    let next = try reload()
                    Self.logUnappliable(from: configuration, to: next, logger: logger)
                    configuration = next
                    let applied = next
                    try? eventLoop.submit { plane.value.update(configuration: applied) }.wait()
                    link.update(configuration: applied)
                    logger.notice("configuration reloaded")
                } catch {
                    logger.error("reload failed, keeping the running configuration: \(error)")
                }
                let status = (try? eventLoop.submit { plane.value.statusSummary() }.wait()) ?? ""
                Systemd.notify("READY=1\nSTATUS=\(status)")
                continue
            }
            logger.notice("signal \(signal): closing the upstream (1001) and stopping")
            break
        }
        Systemd.notify("STOPPING=1\nSTATUS=stopping")
        let stopped = link.shutdown()
        let timeout = eventLoop.scheduleTask(in: .seconds(5)) {}
        _ = try? stopped.or(timeout.futureResult).wait()
        // Subscribers get what is queued for them (as far as their sockets take it), then EOF.
        let flushed = eventLoop.flatSubmit { plane.value.shutdown() }
        let flushTimeout = eventLoop.scheduleTask(in: .seconds(2)) {}
        _ = try? flushed.or(flushTimeout.futureResult).wait()
        try? server.close().wait()
        if activated.isEmpty { unlink(boundSocket) }
        if configuration.reachability.enabled { monitor.stop() }
        logger.notice("stopped")
        return 0
    }

    /// Names the changed settings that a reload cannot apply to the running process.
    static func logUnappliable(from old: Configuration, to new: Configuration, logger: Logger) {
        var restart: [String] = []
        if old.local.socket != new.local.socket { restart.append("local.socket") }
        if old.local.mode != new.local.mode { restart.append("local.mode") }
        if old.local.group != new.local.group { restart.append("local.group") }
        if old.local.maxLine != new.local.maxLine { restart.append("local.max_line") }
        if old.reachability != new.reachability { restart.append("reachability") }
        if old.log != new.log { restart.append("log.level") }
        if !restart.isEmpty {
            logger.warning("reload: \(restart.joined(separator: ", ")) changed but apply only after a restart (systemctl restart wsbridged)")
        }
        var reconnect: [String] = []
        if old.upstream != new.upstream { reconnect.append("upstream") }
        if old.tls != new.tls { reconnect.append("tls") }
        if old.proxy != new.proxy { reconnect.append("proxy") }
        if old.auth != new.auth { reconnect.append("auth") }
        if !reconnect.isEmpty {
            logger.notice("reload: \(reconnect.joined(separator: ", ")) changed: used from the next connection (wsbridgectl reconnect applies them now)")
        }
    }

    static func preview(_ message: UpstreamMessage) -> String {
        let limit = 120
        var data = message.data
        switch message.kind {
        case .text:
            let bytes = data.readBytes(length: min(limit, data.readableBytes)) ?? []
            var text = String(decoding: bytes, as: UTF8.self)
            text = String(text.map { $0.isNewline ? " " : $0 })
            return message.data.readableBytes > limit ? text + "…" : text
        case .binary:
            let bytes = data.readBytes(length: min(32, data.readableBytes)) ?? []
            let hex = bytes.map { b in (b < 16 ? "0" : "") + String(b, radix: 16) }.joined()
            return message.data.readableBytes > 32 ? hex + "…" : hex
        }
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
