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
        let status =
            (try? await running.eventLoop.submit {
                bridge.value.plane.reloaded(reload)
                return bridge.value.plane.statusSummary
            }.get()) ?? ""
        Systemd.status(status)
        Systemd.notify("READY=1")
    }

    /// The changed settings that a reload cannot apply to the running process, and those used
    /// from the next connection.
    static func unappliable(from old: Configuration, to new: Configuration) -> (restart: [String], reconnect: [String]) {
        var restart: [String] = []
        if old.local.socket != new.local.socket { restart.append("local.socket") }
        if old.local.mode != new.local.mode { restart.append("local.mode") }
        if old.local.group != new.local.group { restart.append("local.group") }
        if old.local.maxLine != new.local.maxLine { restart.append("local.max_line") }
        if old.local.sendBufferBytes != new.local.sendBufferBytes { restart.append("local.send_buffer_bytes") }
        if old.reachability.enabled != new.reachability.enabled || old.reachability.pollInterval != new.reachability.pollInterval {
            restart.append("reachability")
        }
        if old.log != new.log { restart.append("log.level") }
        if old.metrics != new.metrics { restart.append("metrics") }
        if old.queue.spool != new.queue.spool { restart.append("queue.spool") }
        if old.journal != new.journal { restart.append("journal") }
        if old.applicationProtocol != new.applicationProtocol { restart.append("upstream.protocol and [protocol]") }
        var reconnect: [String] = []
        if old.upstream != new.upstream { reconnect.append("upstream") }
        if old.tls != new.tls { reconnect.append("tls") }
        if old.proxy != new.proxy { reconnect.append("proxy") }
        if old.auth != new.auth { reconnect.append("auth") }
        return (restart, reconnect)
    }
}
