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
package final class DaemonService: Service, Sendable {
    /// What `--check-config` checks beyond the file itself: the TLS files load (a missing
    /// tls.ca_file must not pass the check and fail at the first connection).
    package static func checkFiles(_ configuration: Configuration) throws {
        try ConnectorFactory.check(configuration)
    }

    /// The daemon could not start: what, its text, and what the process exits with
    /// (sysexits.h).
    package enum StartFailure: Error, CustomStringConvertible {
        /// The spool, its sticky keys or the journal (EX_CANTCREAT).
        case durableLog(String)
        /// The local socket (EX_UNAVAILABLE).
        case listen(socket: String, cause: String)
        /// `metrics.listen` (EX_UNAVAILABLE).
        case metrics(address: String, cause: String)
        /// `[fleet]`: the NATS C client (EX_UNAVAILABLE).
        case fleet(String)

        package var exitCode: Int32 {
            switch self {
            case .durableLog: 73
            case .listen, .metrics, .fleet: 69
            }
        }

        package var description: String {
            switch self {
            case .durableLog(let problem): problem
            case .listen(let socket, let cause): "cannot listen on \(socket): \(cause)"
            case .metrics(let address, let cause):
                "cannot serve metrics on \(address) (metrics.listen): \(cause); choose a free local address, or leave metrics.listen empty"
            case .fleet(let problem): problem
            }
        }
    }

    let initial: Configuration
    /// Builds each attempt's connector; holds the environment (proxy variables, credentials).
    let connectors: ConnectorFactory
    let logger: Logger
    let load: @Sendable () throws -> Configuration
    let running = NIOLockedValueBox<Running?>(nil)
    /// Whether the start succeeded (nil while starting), and who waits to know.
    private let started = NIOLockedValueBox<(outcome: Bool?, waiters: [CheckedContinuation<Bool, Never>])>((nil, []))

    /// The live daemon, once started.
    struct Running: Sendable {
        var eventLoop: any EventLoop
        var bridge: NIOLoopBound<Bridge>
        var link: UpstreamLinkHandle
        var connectors: ConnectorFactory
        var configuration: Configuration
        /// Everything that stops, in start order (`DaemonService+Start`).
        var parts: Parts
    }

    /// `load` re-reads the configuration for a reload; a failure keeps the running one.
    package init(configuration: Configuration, environment: [String: String], logger: Logger, load: @escaping @Sendable () throws -> Configuration) {
        self.initial = configuration
        self.connectors = ConnectorFactory(environment: environment)
        self.logger = logger
        self.load = load
    }

    /// Blocks the signals the daemon handles, in every thread it will start. Call first in main:
    /// they are then delivered only through ServiceLifecycle's signal sequences.
    package static func blockSignals() {
        var set = sigset_t()
        sigemptyset(&set)
        for s in [SIGTERM, SIGINT, SIGHUP] { sigaddset(&set, s) }
        pthread_sigmask(SIG_BLOCK, &set, nil)
        signal(SIGPIPE, SIG_IGN)
    }

    package func run() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        // Trapped before READY=1, so a reload request right after it is not lost.
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        let server: Running
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
    package func waitUntilStarted() async -> Bool {
        await withCheckedContinuation { continuation in
            let outcome = self.started.withLockedValue { state -> Bool? in
                if state.outcome == nil { state.waiters.append(continuation) }
                return state.outcome
            }
            if let outcome { continuation.resume(returning: outcome) }
        }
    }

    func settleStart(_ outcome: Bool) {
        let waiters = self.started.withLockedValue { state -> [CheckedContinuation<Bool, Never>] in
            state.outcome = outcome
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(returning: outcome) }
    }

    static func resolvePolicy(_ access: Configuration.Access, logger: Logger) -> AccessPolicy {
        let (policy, unknown) = AccessPolicy.resolve(access)
        if !unknown.isEmpty {
            logger.warning("access.write_groups: no such group \(unknown.joined(separator: ", ")); its members get read-only access")
        }
        return policy
    }

    // MARK: - Stop

    private func stop(_ running: Running) async {
        self.logger.notice("stopping: closing the upstream (1001)")
        Systemd.status("stopping")
        Systemd.notify("STOPPING=1")
        await running.parts.stop()
        self.running.withLockedValue { $0 = nil }
        self.logger.notice("stopped")
        Systemd.flush()
    }
}

extension EventLoopFuture where Value == Void {
    /// Completes when this future does, or once `timeout` has passed, whichever is first. The
    /// timer is cancelled as soon as this future completes: none is left armed.
    func orTimeout(_ timeout: TimeAmount, onTimeout: @escaping @Sendable () -> Void = {}) -> EventLoopFuture<Void> {
        let promise = self.eventLoop.makePromise(of: Void.self)
        let timer = self.eventLoop.scheduleTask(in: timeout) {
            onTimeout()
            promise.succeed(())
        }
        self.whenComplete { _ in
            timer.cancel()
            promise.succeed(())
        }
        return promise.futureResult
    }
}
