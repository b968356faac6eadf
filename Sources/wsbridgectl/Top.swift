import ArgumentParser
import WSBridgeProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// A live view of the daemon, as `nats top` and `vector top` give: the upstream connections
/// (messages a second, round trip, subscriptions) and the local clients (messages a second, how
/// far behind, queue, drops), redrawn in place every interval; q or Ctrl-C ends it.
struct Top: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "A live view of the connections and the subscribers, refreshed in place; q or Ctrl-C ends it.",
        discussion: "Needs a terminal. `wsbridgectl status` and `wsbridgectl metrics` give the same figures once, for scripts.")

    @OptionGroup var global: GlobalOptions

    @Option(help: "Seconds between refreshes.")
    var interval: Double = 1

    @Option(help: "Refresh this many times, then end (0: until q or Ctrl-C).")
    var count = 0

    func validate() throws {
        guard !self.global.json else { throw ValidationError("top draws a screen: `wsbridgectl status --json` gives the JSON") }
        guard self.interval >= 0.1, self.interval <= 3600 else { throw ValidationError("--interval must be from 0.1 to 3600 seconds") }
    }

    func run() throws {
        guard isatty(STDOUT_FILENO) == 1 else {
            Output.error("wsbridgectl top needs a terminal: use `wsbridgectl status` (or `status --json`) in scripts")
            throw ExitCode(64)
        }
        let connection = try self.global.connect()
        let terminal = RawTerminal()
        defer { terminal.restore() }
        var previous: Snapshot?
        var frames = 0
        while true {
            let snapshot: Snapshot
            do {
                snapshot = Snapshot(
                    status: try StatusReport(json: try connection.request(.status)), clients: try ClientsResult(json: try connection.request(.clients)),
                    at: Self.monotonicSeconds())
            } catch let error as DaemonSocket.RequestError {
                terminal.restore()
                Output.error(error.description)
                throw ExitCode(error.exitCode)
            }
            Output.write(
                STDOUT_FILENO,
                "\u{1b}[H\u{1b}[2J"
                    + Self.frame(snapshot, previous: previous, interval: self.interval).split(separator: "\n", omittingEmptySubsequences: false).joined(
                        separator: "\r\n"))
            previous = snapshot
            frames += 1
            if self.count > 0 && frames >= self.count { break }
            if terminal.waitForQuit(seconds: self.interval) { break }
        }
    }

    struct Snapshot {
        var status: StatusReport
        var clients: ClientsResult
        var at: Double
    }

    static func monotonicSeconds() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }

    /// One screen: a line on the feed, the connections, the subscribers.
    static func frame(_ now: Snapshot, previous: Snapshot?, interval: Double) -> String {
        let s = now.status
        let elapsed = previous.map { max(0.001, now.at - $0.at) }
        func rate(_ value: UInt64, _ before: UInt64?) -> String {
            guard let elapsed, let before, value >= before else { return "-" }
            return "\(Int((Double(value - before) / elapsed).rounded()))"
        }
        var lines: [String] = []
        lines.append("wsbridged \(s.version)  \(s.state.rawValue)  seq \(s.seq)  \(s.url)   (q or Ctrl-C ends; every \(interval)s)")
        lines.append("")
        lines.append(Self.row(["CONNECTION", "STATE", "MSGS/S", "RTT", "SUBSCRIPTIONS", "RECONNECTS", "RENEWALS", "WAITING"]))
        if let connections = s.connections {
            let before = Dictionary(uniqueKeysWithValues: (previous?.status.connections ?? []).map { ($0.connection, $0.messagesIn) })
            for c in connections {
                lines.append(
                    Self.row([
                        "\(c.connection)", c.state.rawValue, rate(c.messagesIn, before[c.connection]), c.rttMs.map(Self.millis) ?? "-",
                        "\(c.subscriptions)", "\(c.reconnects)", "\(c.renewals)", "\(c.waiting)",
                    ]))
            }
        } else {
            lines.append(
                Self.row([
                    "1", s.state.rawValue, rate(s.traffic.messagesIn, previous?.status.traffic.messagesIn), s.rttMs.map(Self.millis) ?? "-",
                    "\(Self.subscriptions(s))", "\(s.reconnects)", "\(s.renewal?.renewals ?? 0)", "\(s.limits?.waiting ?? 0)",
                ]))
        }
        lines.append("")
        lines.append(Self.row(["CLIENT", "PID", "PROGRAM", "SUBSCRIBED", "MSGS/S", "BEHIND", "QUEUE", "DROPS"]))
        let before = Dictionary(uniqueKeysWithValues: (previous?.clients.clients ?? []).map { ($0.id, $0.messages) })
        for c in now.clients.clients {
            lines.append(
                Self.row([
                    "\(c.id)", c.pid.map(String.init) ?? "-", c.pid.flatMap(Self.program) ?? c.userAgent.map { "ws: \($0)" } ?? (c.face == nil ? "-" : "ws"),
                    (c.subscribed ? (c.filter.map { "yes (\($0))" } ?? "yes") : "no") + (c.subscriptions.map { ", \($0) held" } ?? ""),
                    rate(c.messages, before[c.id]),
                    "\(c.queued)", "\(c.queueBytes) B", "\(c.drops)",
                ]))
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// A connection's subscriptions: the sticky keys and the protocol's live subscriptions
    /// (those set aside are not on the wire).
    static func subscriptions(_ s: StatusReport) -> Int {
        (s.session?.stickyKeys ?? 0) + (s.protocol?.subscriptions.filter { $0.setAside == nil }.count ?? 0)
    }

    /// A client's program, as the kernel names it (`/proc/PID/comm`); nil when it is gone.
    static func program(_ pid: Int32) -> String? {
        let fd = open("/proc/\(pid)/comm", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 64)
        let n = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { return nil }
        let name = String(decoding: bytes[0..<n].prefix { $0 != 10 }, as: UTF8.self)
        return name.isEmpty ? nil : name
    }

    static func millis(_ ms: Double) -> String { "\((ms * 10).rounded() / 10)ms" }

    private static let widths = [12, 12, 12, 10, 15, 12, 10, 8]

    static func row(_ cells: [String]) -> String {
        cells.enumerated().map { i, cell in
            let width = i < Self.widths.count ? Self.widths[i] : 10
            return cell.count >= width ? cell + " " : cell + String(repeating: " ", count: width - cell.count)
        }.joined().trimmingTrailingSpaces
    }
}

/// The terminal in raw mode (no echo, no line editing, Ctrl-C read as a key) on the alternate
/// screen, put back as it was at the end.
final class RawTerminal {
    private var saved = termios()
    private var raw = false
    private var restored = false

    init() {
        guard isatty(STDIN_FILENO) == 1, tcgetattr(STDIN_FILENO, &self.saved) == 0 else { return }
        var t = self.saved
        t.c_lflag &= ~tcflag_t(ICANON | ECHO | ISIG)
        t.c_cc.6 = 1  // VMIN: a read returns each key
        t.c_cc.5 = 0  // VTIME: no timer
        if tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0 { self.raw = true }
        // The alternate screen, the cursor hidden.
        Output.write(STDOUT_FILENO, "\u{1b}[?1049h\u{1b}[?25l")
    }

    /// Waits up to `seconds` for a key; true when it was q, Q or Ctrl-C (or the input ended).
    func waitForQuit(seconds: Double) -> Bool {
        let deadline = Top.monotonicSeconds() + seconds
        while true {
            let left = deadline - Top.monotonicSeconds()
            guard left > 0 else { return false }
            var p = pollfd(fd: STDIN_FILENO, events: Int16(POLLIN), revents: 0)
            let r = poll(&p, 1, Int32(left * 1000))
            if r < 0 && errno == EINTR { continue }
            guard r > 0 else { return false }
            var byte: UInt8 = 0
            let n = read(STDIN_FILENO, &byte, 1)
            if n <= 0 { return true }
            if byte == UInt8(ascii: "q") || byte == UInt8(ascii: "Q") || byte == 3 { return true }
        }
    }

    func restore() {
        guard !self.restored else { return }
        self.restored = true
        Output.write(STDOUT_FILENO, "\u{1b}[?25h\u{1b}[?1049l")
        if self.raw { tcsetattr(STDIN_FILENO, TCSANOW, &self.saved) }
        self.raw = false
    }
}

extension String {
    fileprivate var trimmingTrailingSpaces: String {
        var s = Substring(self)
        while s.last == " " { s = s.dropLast() }
        return String(s)
    }
}
