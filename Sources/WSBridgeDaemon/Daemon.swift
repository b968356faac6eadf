import Logging
import NIOCore
import NIOPosix
import WSBridgeCore

#if canImport(Glibc)
import Glibc
#endif

/// Assembles and runs the daemon: the upstream link on its event loop, the reachability monitor,
/// and signal handling (SIGTERM/SIGINT: close upstream with 1001 and exit 0).
public enum Daemon {
    /// Blocks the signals the daemon handles, in every thread it will start. Call first in main.
    public static func blockSignals() {
        var set = sigset_t()
        sigemptyset(&set)
        for s in [SIGTERM, SIGINT, SIGHUP] { sigaddset(&set, s) }
        pthread_sigmask(SIG_BLOCK, &set, nil)
        signal(SIGPIPE, SIG_IGN)
    }

    /// Runs until SIGTERM or SIGINT. Returns the process exit code.
    public static func run(configuration: Configuration, environment: [String: String], logger: Logger) -> Int32 {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { try? group.syncShutdownGracefully() }
        let eventLoop = group.next()

        let upstream = configuration.upstream.url
        let reachHost = UpstreamConnector.proxy(for: configuration, environment: environment)?.host ?? upstream.host
        let monitor = ReachabilityMonitor(host: reachHost, pollInterval: configuration.reachability.pollInterval, logger: logger)
        let networkAvailable = configuration.reachability.enabled ? monitor.routeExists() : true

        let plane: NIOLoopBound<LocalPlane>
        do {
            plane = try eventLoop.submit {
                NIOLoopBound(LocalPlane(configuration: configuration, eventLoop: eventLoop, logger: logger), eventLoop: eventLoop)
            }.wait()
        } catch {
            logger.critical("cannot start the local plane: \(error)")
            return 1
        }
        let link: UpstreamLinkHandle
        do {
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
            try eventLoop.submit { plane.value.link = link.link.value }.wait()
        } catch {
            logger.critical("cannot start the upstream link: \(error)")
            return 1
        }

        let server: any Channel
        do {
            server = try LocalServer.start(
                path: configuration.local.socket,
                configuration: configuration,
                eventLoop: eventLoop,
                plane: plane,
                logger: logger
            )
        } catch {
            logger.critical("cannot listen on the local socket: \(error)")
            return 69  // EX_UNAVAILABLE
        }

        if configuration.reachability.enabled {
            monitor.start(
                initial: networkAvailable,
                callbacks: .init(
                    changed: { available in link.networkChanged(available: available) },
                    resumed: { slept in link.checkLiveness(why: "resumed after \(slept.short) of suspend") }
                )
            )
        }
        logger.notice("wsbridged \(WSBridgeVersion.current) starting", metadata: ["upstream.url": "\(upstream)"])
        link.connect()

        var set = sigset_t()
        sigemptyset(&set)
        for s in [SIGTERM, SIGINT, SIGHUP] { sigaddset(&set, s) }
        while true {
            var signal: Int32 = 0
            guard sigwait(&set, &signal) == 0 else { continue }
            if signal == SIGHUP {
                logger.notice("SIGHUP: configuration reload is not implemented yet; restart to apply changes")
                continue
            }
            logger.notice("signal \(signal): closing the upstream (1001) and stopping")
            break
        }
        let stopped = link.shutdown()
        let timeout = eventLoop.scheduleTask(in: .seconds(5)) {}
        _ = try? stopped.or(timeout.futureResult).wait()
        try? server.close().wait()
        unlink(configuration.local.socket)
        if configuration.reachability.enabled { monitor.stop() }
        logger.notice("stopped")
        return 0
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
