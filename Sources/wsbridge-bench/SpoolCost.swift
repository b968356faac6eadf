import ArgumentParser
import Foundation
import Glibc
import NIOConcurrencyHelpers
import NIOCore
import WSBridgeCore

#if canImport(Glibc)
    import Glibc
#endif

/// What the durable spool costs a queued send, side by side with the in-memory queue in one
/// run: sends while the link is down, pipelined by one client and by eight, and one at a time
/// (the reply latency a careful client sees). The daemon runs with `connect_on_start = false`,
/// so every send is queued; each mode gets a fresh daemon and a fresh spool directory.
struct SpoolCost: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "spool",
        abstract: "Queued sends per second and reply latency: in memory, queue.fsync = batch, queue.fsync = always."
    )

    @Option(help: "Folder with wsbridged (a release build).")
    var bin: String

    @Option(help: "Runs of every mode (medians are reported, with the range).")
    var runs = 5

    @Option(help: "Sends per pipelined scenario (split over the clients).")
    var messages = 20_000

    @Option(help: "Sends one at a time, for the latency.")
    var serial = 1000

    @Option(help: "Payload bytes per send.")
    var size = 100

    @Option(help: "Where the spool directories go: a real disk (tmpfs would make fdatasync free).")
    var dir = "/var/tmp"

    enum Mode: String, CaseIterable {
        case memory = "in memory (spool off)"
        case batch = "spool, fsync batch"
        case always = "spool, fsync always"
    }

    struct Sample {
        var oneClient: Double
        var eightClients: Double
        var p50: Double
        var p99: Double
        var sendsPerSync: Double
        var cpuMicrosPerSend: Double
    }

    func run() async throws {
        let base = "\(self.dir)/wsbridge-bench-spool-\(getpid())"
        try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: base) }
        let fsType = Self.filesystem(base)
        print("spool directories in \(self.dir) (\(fsType))")
        if fsType == "tmpfs" { print("note: on tmpfs fdatasync costs nothing; pass --dir on a real disk") }
        var samples: [Mode: [Sample]] = [:]
        for run in 1...max(1, self.runs) {
            for mode in Mode.allCases {
                let s = try await self.measure(mode, in: "\(base)/r\(run)-\(mode)")
                samples[mode, default: []].append(s)
                emitLine(
                    "run \(run) \(mode.rawValue): \(Format.human(s.oneClient))/s from 1 client, \(Format.human(s.eightClients))/s from 8, "
                        + "p50 \(Int(s.p50)) µs, p99 \(Int(s.p99)) µs one at a time"
                )
            }
        }
        print("")
        print("\(self.runs) runs, medians (min–max); \(self.size)-byte sends, queued while the link is down")
        print("")
        print("| | " + Mode.allCases.map(\.rawValue).joined(separator: " | ") + " |")
        print("| --- |" + String(repeating: " ---: |", count: Mode.allCases.count))
        func row(_ name: String, _ value: (Sample) -> Double, _ format: (Double) -> String) {
            let cells = Mode.allCases.map { mode -> String in
                let v = (samples[mode] ?? []).map(value)
                guard let lo = v.min(), let hi = v.max(), hi > 0 else { return "–" }
                return "\(format(Format.median(v))) (\(format(lo))–\(format(hi)))"
            }
            print("| \(name) | " + cells.joined(separator: " | ") + " |")
        }
        row("sends/s, 1 client pipelined", \.oneClient, Format.human)
        row("sends/s, 8 clients pipelined", \.eightClients, Format.human)
        row("reply latency p50, one at a time (µs)", \.p50) { String(Int($0)) }
        row("reply latency p99, one at a time (µs)", \.p99) { String(Int($0)) }
        row("sends per fdatasync, pipelined", \.sendsPerSync) { $0 == 0 ? "–" : String(format: "%.0f", $0) }
        row("daemon CPU per send, pipelined (µs)", \.cpuMicrosPerSend) { String(format: "%.1f", $0) }
    }

    private func measure(_ mode: Mode, in dir: String) async throws -> Sample {
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let socket = "\(dir)/d.sock"
        let spool = mode == .memory ? "" : "spool = \"\(dir)/spool\"\nfsync = \"\(mode == .always ? "always" : "batch")\"\n"
        let config = "\(dir)/wsbridged.toml"
        try """
        [upstream]
        url = "ws://127.0.0.1:9/"
        connect_on_start = false
        [reachability]
        enabled = false
        [local]
        socket = "\(socket)"
        [queue]
        max_messages = \(self.messages * 3 + self.serial + 10)
        max_bytes = \(1 << 34)
        \(spool)
        [log]
        level = "warning"
        """.write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = try Child("\(self.bin)/wsbridged", ["--config", config])
        defer { daemon.stop() }
        while !FileManager.default.fileExists(atPath: socket) { try await Task.sleep(for: .milliseconds(5)) }
        let payload = String(repeating: "x", count: self.size)

        let syncsBefore = try await Self.fsyncs(socket)
        let cpuBefore = Environment.cpuSeconds(daemon.pid)
        let one = try await Self.pipelined(socket: socket, clients: 1, total: self.messages, payload: payload)
        let eight = try await Self.pipelined(socket: socket, clients: 8, total: self.messages, payload: payload)
        let cpu = Environment.cpuSeconds(daemon.pid) - cpuBefore
        let syncs = try await Self.fsyncs(socket) - syncsBefore
        let latencies = try await Self.oneAtATime(socket: socket, count: self.serial, payload: payload).sorted()
        return Sample(
            oneClient: Double(self.messages) / one,
            eightClients: Double(self.messages) / eight,
            p50: latencies[latencies.count / 2],
            p99: latencies[min(latencies.count - 1, latencies.count * 99 / 100)],
            sendsPerSync: syncs > 0 ? Double(2 * self.messages) / Double(syncs) : 0,
            cpuMicrosPerSend: cpu * 1e6 / Double(2 * self.messages)
        )
    }

    /// The filesystem type of `path`, as stat(1) names it.
    static func filesystem(_ path: String) -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/stat")
        p.arguments = ["-f", "-c", "%T", path]
        let out = Pipe()
        p.standardOutput = out
        guard (try? p.run()) != nil else { return "unknown filesystem" }
        p.waitUntilExit()
        let name = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return name.isEmpty ? "unknown filesystem" : name
    }

    // MARK: - Clients (blocking sockets, each on its own threads)

    /// Seconds for `clients` connections to send `total` sends between them and read every reply.
    /// `payload`: each send's text, JSON-escaped (`text(n)`, the nth send's, when given);
    /// `answered`: each send is answered upstream with a message routed to its client (a
    /// Socket.IO ack), which the client reads too.
    static func pipelined(
        socket: String, clients: Int, total: Int, payload: String, text: (@Sendable (Int) -> String)? = nil, answered: Bool = false
    ) async throws -> Double {
        let fds = try (0..<clients).map { _ in try BlockingClient(path: socket) }
        let start = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (i, client) in fds.enumerated() {
                let count = total / clients + (i < total % clients ? 1 : 0)
                group.addTask {
                    try await onThread {
                        // Written from one thread, read from another: neither side can block the other.
                        let writer = Thread {
                            var batch = ""
                            for n in 0..<count {
                                batch += #"{"id":\#(n),"op":"send","text":"\#(text?(n) ?? payload)"}"# + "\n"
                                if batch.utf8.count > 32768 || n == count - 1 {
                                    client.write(batch)
                                    batch = ""
                                }
                            }
                        }
                        writer.start()
                        try client.readReplies(count, messages: answered ? count : 0)
                    }
                }
            }
            try await group.waitForAll()
        }
        return (ContinuousClock.now - start).seconds
    }

    /// Microseconds from each send to its reply, one at a time.
    static func oneAtATime(socket: String, count: Int, payload: String) async throws -> [Double] {
        let client = try BlockingClient(path: socket)
        return try await onThread {
            var latencies: [Double] = []
            for n in 0..<count {
                let start = ContinuousClock.now
                client.write(#"{"id":\#(n),"op":"send","text":"\#(payload)"}"# + "\n")
                try client.readReplies(1)
                latencies.append((ContinuousClock.now - start).seconds * 1e6)
            }
            return latencies
        }
    }

    /// The spool's fdatasyncs so far, from `status`.
    static func fsyncs(_ socket: String) async throws -> Int {
        let client = try BlockingClient(path: socket)
        return try await onThread {
            client.write(#"{"id":"s","op":"status"}"# + "\n")
            let line = try client.readReplies(1)
            guard let range = line.range(of: #""fsyncs":"#) else { return 0 }
            return Int(line[range.upperBound...].prefix { $0.isNumber }) ?? 0
        }
    }
}

/// Runs blocking work on a thread of its own (not the cooperative pool).
func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}

/// A blocking client of the daemon's socket.
final class BlockingClient: Sendable {
    let fd: Int32

    init(path: String) throws {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        let r = (try? SocketAddress(unixDomainSocketPath: path).withSockAddr { connect(fd, $0, socklen_t($1)) }) ?? -1
        guard r == 0 else {
            close(fd)
            throw BenchError("cannot connect to \(path)")
        }
        self.fd = fd
    }

    deinit { close(self.fd) }

    func write(_ text: String) {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeMutableBytes { Glibc.write(self.fd, $0.baseAddress, $0.count) }
            if n <= 0 { return }
            offset += n
        }
        bytes.removeAll()
    }

    /// Reads until `count` reply lines and `messages` message lines have come (other lines, such
    /// as hello, are skipped); returns the last reply.
    @discardableResult
    func readReplies(_ count: Int, messages: Int = 0) throws -> String {
        var seen = 0
        var seenMessages = 0
        var partial: [UInt8] = []
        var last = ""
        var chunk = [UInt8](repeating: 0, count: 65536)
        let marker = Array(#"{"type":"reply""#.utf8)
        let message = Array(#"{"type":"message""#.utf8)
        while seen < count || seenMessages < messages {
            let n = chunk.withUnsafeMutableBytes { read(self.fd, $0.baseAddress, $0.count) }
            guard n > 0 else { throw BenchError("the daemon closed the connection after \(seen) of \(count) replies") }
            partial.append(contentsOf: chunk[0..<n])
            var start = 0
            while let nl = partial[start...].firstIndex(of: 0x0A) {
                if partial[start..<nl].starts(with: marker) {
                    seen += 1
                    if seen == count { last = String(decoding: partial[start..<nl], as: UTF8.self) }
                } else if partial[start..<nl].starts(with: message) {
                    seenMessages += 1
                }
                start = nl + 1
            }
            partial.removeFirst(start)
        }
        return last
    }
}
