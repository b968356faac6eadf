import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import WSBridgeCore
import WSBridgeProtocol

extension DaemonService {
    /// Re-reads the configuration and applies what a running daemon can change: queue and plane
    /// limits, access, heartbeat, backoff, and the upstream, TLS, proxy and token settings (used
    /// from the next connection; the TLS context is rebuilt). The reachability monitor follows a
    /// changed upstream or proxy host. A configuration that does not load keeps the running one.
    /// SIGHUP calls this; so may tests.
    package func reload() async {
        guard let running = self.running.withLockedValue({ $0 }) else { return }
        Systemd.notify("RELOADING=1\nMONOTONIC_USEC=\(Systemd.monotonicMicroseconds())")
        let logger = self.logger
        var outcome = StatusReport.Reload(at: 0)
        do {
            // Reading the file and resolving group names block: off the loop and off the
            // cooperative pool.
            let load = self.load
            let (next, policy) = try await NIOThreadPool.singleton.runIfActive {
                let next = try load()
                return (next, Self.resolvePolicy(next.access, logger: logger))
            }
            (outcome.restartNeeded, outcome.nextConnection) = Self.unappliable(from: running.configuration, to: next)
            if !outcome.restartNeeded.isEmpty {
                logger.warning(
                    "reload: \(outcome.restartNeeded.joined(separator: ", ")) changed but apply only after a restart (systemctl restart wsbridged)")
            }
            if !outcome.nextConnection.isEmpty {
                logger.notice(
                    "reload: \(outcome.nextConnection.joined(separator: ", ")) changed: used from the next connection (wsbridgectl reconnect applies them now)"
                )
            }
            if next.tls != running.configuration.tls || next.upstream.url != running.configuration.upstream.url {
                running.connectors.forgetTLS()
            }
            try await running.parts.reload(next, policy: policy)
            self.running.withLockedValue { $0?.configuration = next }
            logger.notice("configuration reloaded")
        } catch {
            logger.error("reload failed, keeping the running configuration: \(error)")
            outcome.error = "\(error)"
        }
        outcome.at = WallClock.millisecondsSinceEpoch()
        let bridge = running.bridge
        let reload = outcome
        try? await running.eventLoop.submit {
            bridge.value.plane.reloaded(reload)
            bridge.value.plane.postStatus()
        }.get()
        Systemd.notify("READY=1")
    }

    /// The changed keys that a reload cannot apply to the running process, and those used from
    /// the next connection: each key says which where it is read (`ReloadEffect`).
    static func unappliable(from old: Configuration, to new: Configuration) -> (restart: [String], reconnect: [String]) {
        let changed = Configuration.changedKeys(from: old, to: new)
        return (changed.filter { $0.reload == .restart }.map(\.key), changed.filter { $0.reload == .nextConnection }.map(\.key))
    }
}
