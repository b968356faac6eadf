import CWSBridgeLinux
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import WSBridgeCore

#if canImport(Glibc)
    import Glibc
#endif

/// Watches whether a route to an upstream host exists (any of them: the primary, the
/// fallbacks, or the proxy they go through): kernel rtnetlink events (link,
/// address and route changes) wake it at once, and a slow poll catches anything missed. It also
/// notices suspend/resume (CLOCK_BOOTTIME jumping ahead of CLOCK_MONOTONIC).
///
/// Runs on one dedicated thread blocked in `poll(2)`, so an idle daemon has no wakeups from it
/// beyond `reachability.poll_interval`.
package final class ReachabilityMonitor: Sendable {
    package struct Callbacks: Sendable {
        package var changed: @Sendable (Bool) -> Void
        /// Links, addresses or routes changed while a route to the upstream still exists: the
        /// open connection may now be stale (a new address, another interface).
        package var touched: @Sendable () -> Void
        package var resumed: @Sendable (Duration) -> Void
        package init(
            changed: @escaping @Sendable (Bool) -> Void,
            touched: @escaping @Sendable () -> Void = {},
            resumed: @escaping @Sendable (Duration) -> Void
        ) {
            self.changed = changed
            self.touched = touched
            self.resumed = resumed
        }
    }

    /// Changes on a reload that changes the upstream URLs or the proxy.
    private let hosts: NIOLockedValueBox<[String]>
    private let stopping = NIOLockedValueBox(false)
    private let pollInterval: Duration
    private let logger: Logger
    private let wakeFDs: (read: Int32, write: Int32)
    private let thread: NIOLockedValueBox<NIOThreadPool?> = .init(nil)

    /// poll(2), or a stand-in that fails (tests: a failing poll must not end the monitor).
    typealias Poll = @Sendable (UnsafeMutablePointer<pollfd>, nfds_t, Int32) -> Int32
    private let pollEvents: Poll

    package convenience init(hosts: [String], pollInterval: Duration, logger: Logger) {
        self.init(hosts: hosts, pollInterval: pollInterval, logger: logger, poll: { Glibc.poll($0, $1, $2) })
    }

    init(hosts: [String], pollInterval: Duration, logger: Logger, poll: @escaping Poll) {
        self.pollEvents = poll
        self.hosts = NIOLockedValueBox(hosts)
        self.pollInterval = pollInterval
        self.logger = logger
        var fds: [Int32] = [-1, -1]
        if pipe(&fds) == 0 {
            for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        } else {
            fds = [-1, -1]
        }
        self.wakeFDs = (fds[0], fds[1])
    }

    deinit {
        if self.wakeFDs.read >= 0 { close(self.wakeFDs.read) }
        if self.wakeFDs.write >= 0 { close(self.wakeFDs.write) }
    }

    /// Whether a route to any watched host exists now (with failover, one reachable URL is
    /// enough to keep trying). Blocking (may resolve names): call off the event loop.
    package func routeExists() -> Bool {
        self.hosts.withLockedValue { $0 }.contains { Self.routeExists(host: $0) }
    }

    /// The hosts whose routes are watched.
    package var watchedHosts: [String] { self.hosts.withLockedValue { $0 } }

    /// Watches other hosts from now on (a reload changed the upstream URLs or the proxy),
    /// checking their routes at once.
    package func update(hosts: [String]) {
        let changed = self.hosts.withLockedValue { old -> Bool in
            defer { old = hosts }
            return old != hosts
        }
        guard changed else { return }
        self.logger.info("reachability: now watching the route to \(hosts.joined(separator: ", "))")
        self.wake()
    }

    /// The hosts whose routes matter: each upstream URL's, or the proxy's it goes through.
    static func hosts(for configuration: Configuration, connectors: ConnectorFactory) -> [String] {
        var hosts: [String] = []
        for url in configuration.upstream.urls {
            var c = configuration
            c.upstream.url = url
            let host = connectors.proxy(for: c)?.host ?? url.host
            if !hosts.contains(host) { hosts.append(host) }
        }
        return hosts
    }

    private func wake() {
        guard self.wakeFDs.write >= 0 else { return }
        var byte: UInt8 = 1
        _ = write(self.wakeFDs.write, &byte, 1)
    }

    static func routeExists(host: String) -> Bool {
        // An error from the lookup itself is not evidence of "no route": only 0 is.
        if let literal = try? SocketAddress(ipAddress: host, port: 0) {
            return literal.withSockAddr { address, _ in cwsb_route_exists_to(address) } != 0
        }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &result) == 0, let first = result else {
            // Name resolution failed: reachability is unknown; let connection attempts decide.
            return true
        }
        defer { freeaddrinfo(first) }
        var found = false
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let ai = cursor {
            if let address = ai.pointee.ai_addr {
                let r = cwsb_route_exists_to(address)
                if r == -EAFNOSUPPORT {
                    cursor = ai.pointee.ai_next
                    continue
                }
                found = true
                if r != 0 { return true }
            }
            cursor = ai.pointee.ai_next
        }
        return !found
    }

    /// Starts watching. `initial` is the state the caller already knows.
    package func start(initial: Bool, callbacks: Callbacks) {
        let pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        self.thread.withLockedValue { $0 = pool }
        pool.submit { [self] state in
            guard state == .active else { return }
            self.run(initial: initial, callbacks: callbacks)
        }
    }

    package func stop() {
        self.stopping.withLockedValue { $0 = true }
        self.wake()
        let pool = self.thread.withLockedValue { p -> NIOThreadPool? in
            defer { p = nil }
            return p
        }
        try? pool?.syncShutdownGracefully()
    }

    private func run(initial: Bool, callbacks: Callbacks) {
        let netlink = cwsb_rtnetlink_open()
        if netlink < 0 {
            self.logger.warning(
                "reachability: cannot open rtnetlink (\(String(cString: strerror(-netlink)))); falling back to polling every \(self.pollInterval.short)"
            )
        }
        defer { if netlink >= 0 { close(netlink) } }
        var last = initial
        var suspend = SuspendDetector(gap: Self.suspendOffset())
        let timeoutMs = Int32(clamping: self.pollInterval.nanoseconds / 1_000_000)
        while true {
            var fds = [
                pollfd(fd: netlink, events: Int16(POLLIN), revents: 0),
                pollfd(fd: self.wakeFDs.read, events: Int16(POLLIN), revents: 0),
            ]
            let n = self.pollEvents(&fds, 2, timeoutMs)
            // Checked on every turn, not only when the wake pipe is seen: a poll that keeps
            // failing must not keep the monitor (and the daemon's stop) waiting.
            if self.stopping.withLockedValue({ $0 }) { return }
            if n < 0 && errno != EINTR {
                // Never silently: say so, and keep checking at the poll interval.
                self.logger.error(
                    "reachability: poll failed (\(String(cString: strerror(errno)))); checking every \(self.pollInterval.short) without events"
                )
                _ = poll(nil, 0, timeoutMs)  // no descriptors: just the wait
            }
            var woken = false
            if n > 0 && fds[1].revents != 0 {
                if self.stopping.withLockedValue({ $0 }) { return }
                var drain = [UInt8](repeating: 0, count: 64)
                _ = read(self.wakeFDs.read, &drain, drain.count)
                woken = true
            }
            var netlinkChanges: Int32?
            if n > 0 && fds[0].revents != 0 { netlinkChanges = cwsb_rtnetlink_drain(netlink) }
            guard let why = Self.checkReason(woken: woken, netlinkChanges: netlinkChanges) else { continue }
            if let slept = suspend.observe(gap: Self.suspendOffset()) {
                self.logger.info("reachability: system resumed after \(slept.short) of suspend")
                callbacks.resumed(slept)
            }
            let now = self.routeExists()
            if now != last {
                self.logger.debug("reachability: route \(now ? "appeared" : "vanished") (\(why))")
                last = now
                callbacks.changed(now)
            } else if now && why != "poll" {
                callbacks.touched()
            }
        }
    }

    /// Why this turn of the loop checks the route, or nil to skip the check: a batch of
    /// rtnetlink messages with no link, address or route change in it (`netlinkChanges` 0, or
    /// -EAGAIN when it was drained already) is noise, unless a wake-up (a reload's new hosts)
    /// came in the same poll. A poll that timed out or failed (neither) is the slow poll.
    static func checkReason(woken: Bool, netlinkChanges: Int32?) -> String? {
        if woken { return "host changed" }
        guard let changes = netlinkChanges else { return "poll" }
        return changes == 0 || changes == -EAGAIN ? nil : "rtnetlink"
    }

    /// Time spent suspended since boot: CLOCK_BOOTTIME - CLOCK_MONOTONIC.
    static func suspendOffset() -> Duration {
        let boot = cwsb_boottime_ns()
        let mono = cwsb_monotonic_ns()
        return .nanoseconds(Int64(clamping: boot &- mono))
    }
}
