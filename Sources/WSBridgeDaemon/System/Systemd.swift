import CSystemd
import CWSBridgeLinux
import Dispatch
import NIOConcurrencyHelpers

#if canImport(Glibc)
    import Glibc
#endif

/// The parts of libsystemd the daemon uses: readiness and status notification, the watchdog,
/// and socket activation. Every call is a no-op outside systemd (no NOTIFY_SOCKET, no LISTEN_FDS).
package enum Systemd {
    /// Notifications leave in order from one serial queue, never from the caller's thread:
    /// sd_notify's send blocks while the receiver's queue is full (PID 1 busy, or a notify
    /// socket nobody reads; net.unix.max_dgram_qlen is 10 in a container), and an event loop
    /// waiting on it would stall every client and the upstream with it.
    private static let queue = DispatchQueue(label: "wsbridged.sd_notify")
    /// The newest STATUS= text not yet sent: a burst of changes (100 subscribers connecting)
    /// sends the last one, not each.
    private static let waitingStatus = NIOLockedValueBox<String?>(nil)

    /// Whether notifications leave from the daemon's own socket, opened at the first one (at
    /// start): out of file descriptors, a notification still leaves (sd_notify opens a socket
    /// per call), so the watchdog is pinged and STATUS= says the daemon refuses clients. Another
    /// kind of NOTIFY_SOCKET (vsock:) goes through sd_notify.
    private static let ownSocket: Bool = getenv("NOTIFY_SOCKET").map { cwsb_notify_open($0) == 0 } ?? false

    /// Sends a notification (`READY=1`, `RELOADING=1`, ...) after those before it; a no-op
    /// outside systemd.
    package static func notify(_ state: String) {
        Self.queue.async { Self.send(state) }
    }

    /// Sends `state` now (on `queue`).
    private static func send(_ state: String) {
        if Self.ownSocket {
            _ = cwsb_notify_send(state)
        } else {
            _ = sd_notify(0, state)
        }
    }

    /// Sets the STATUS= line that `systemctl status` shows, coalescing a burst of changes.
    package static func status(_ text: String) {
        let queued = Self.waitingStatus.withLockedValue { waiting -> Bool in
            defer { waiting = text }
            return waiting != nil
        }
        guard !queued else { return }
        Self.queue.async {
            guard
                let text = Self.waitingStatus.withLockedValue({ waiting in
                    defer { waiting = nil }
                    return waiting
                })
            else { return }
            // One line: a newline would end STATUS= there and read the rest as other fields
            // (a start failure's text can span lines: a configuration error's context).
            Self.send("STATUS=" + text.split(whereSeparator: \.isNewline).joined(separator: " "))
        }
    }

    /// Waits until every notification posted so far has been sent (before the process exits),
    /// for at most `timeout`: a receiver that never reads must not keep the daemon from exiting.
    package static func flush(timeout: Duration = .seconds(2)) {
        let sent = DispatchSemaphore(value: 0)
        Self.queue.async { sent.signal() }
        _ = sent.wait(timeout: .now() + .nanoseconds(Int(timeout.components.seconds * 1_000_000_000)))
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
