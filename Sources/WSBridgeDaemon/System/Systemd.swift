import CSystemd
import CWSBridgeLinux

#if canImport(Glibc)
    import Glibc
#endif

/// The parts of libsystemd the daemon uses: readiness and status notification, the watchdog,
/// and socket activation. Every call is a no-op outside systemd (no NOTIFY_SOCKET, no LISTEN_FDS).
package enum Systemd {
    /// Sends a notification (`READY=1`, `STATUS=...`, ...). Returns false when not under systemd.
    @discardableResult
    package static func notify(_ state: String) -> Bool {
        sd_notify(0, state) > 0
    }

    /// Half the watchdog timeout, if systemd expects WATCHDOG=1 pings from this process.
    package static func watchdogPingInterval() -> Duration? {
        var usec: UInt64 = 0
        guard sd_watchdog_enabled(0, &usec) > 0, usec > 0 else { return nil }
        return .microseconds(Int64(usec / 2))
    }

    /// Sockets passed by systemd (socket activation), with their names (FileDescriptorName=).
    /// Clears LISTEN_* so children do not inherit them.
    package static func listenedSockets() -> [(fd: Int32, name: String)] {
        var names: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
        let count = sd_listen_fds_with_names(1, &names)
        guard count > 0 else { return [] }
        var result: [(Int32, String)] = []
        for i in 0..<Int(count) {
            var name = "unknown"
            if let names, let c = names[i] {
                name = String(cString: c)
                free(c)
            }
            result.append((SD_LISTEN_FDS_START + Int32(i), name))
        }
        free(names)
        return result
    }

    /// CLOCK_MONOTONIC in microseconds, for RELOADING=1's MONOTONIC_USEC.
    package static func monotonicMicroseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000 + UInt64(ts.tv_nsec) / 1000
    }
}
