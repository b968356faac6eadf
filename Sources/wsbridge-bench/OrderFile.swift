import ArgumentParser
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The release link's section ordering file (scripts/lib/hot-text.order): every function
/// wsbridged runs over a life, hottest first, as its function section (`.text.NAME`), so that
/// the linker lays the code the daemon runs side by side. The kernel maps a binary's pages in
/// 64 KiB blocks around each one touched; the few thousand functions a daemon runs, scattered
/// through 15 MiB of text, otherwise make most of the text resident (docs/performance.md, "Idle
/// RSS"). The life, under `valgrind --tool=callgrind`: start-up, a connection, heartbeats,
/// messages flooded to readers, `status` and `send` from wsbridgectl, a reload, a stop.
struct OrderFile: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "order-file",
        abstract: "Profile wsbridged (callgrind) and write the section ordering file for the release link."
    )

    @Option(help: "Folder with wsbridged, wsbridgectl, wsbridge-testserver and wsbridge-reader (a release build).")
    var bin: String

    @Option(help: "Where to write the ordering file.")
    var output = "scripts/lib/hot-text.order"

    @Option(help: "Messages flooded to the readers (then as many at 200 a second).")
    var messages = 2_000

    @Option(help: "The configuration the daemon runs with (its heartbeat made 1 s; --url and --socket given).")
    var config = "etc/wsbridged.toml"

    func run() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("wsbridge-order-\(getpid())").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // valgrind cannot read the static build's debug information: a copy without it.
        let daemon = "\(dir)/wsbridged"
        guard try Command.run("/usr/bin/strip", ["--strip-debug", "\(self.bin)/wsbridged", "-o", daemon]) == 0 else {
            throw BenchError("strip --strip-debug \(self.bin)/wsbridged failed")
        }
        try await self.live(daemon: daemon, dir: dir)
        let profile = try CallgrindProfile(path: "\(dir)/callgrind.out", object: "/wsbridged")
        let functions = try Self.functions(of: daemon)
        var cost: [String: Int] = [:]
        for (name, instructions) in profile.selfCost {
            guard let symbol = name.hasPrefix("0x") ? UInt64(name.dropFirst(2), radix: 16).flatMap(functions.containing) : name else { continue }
            cost[symbol, default: 0] += instructions
        }
        let hot = cost.filter { functions.sizes[$0.key] != nil }.sorted { ($0.value, $1.key) > ($1.value, $0.key) }.map(\.key)
        try hot.map { ".text.\($0)\n" }.joined().write(toFile: self.output, atomically: true, encoding: .utf8)
        let bytes = hot.reduce(0) { $0 + (functions.sizes[$1] ?? 0) }
        emitLine("order-file: \(hot.count) functions, \(bytes / 1024) KiB of code, hottest first, written to \(self.output)")
    }

    /// One life of the daemon under callgrind, to `dir/callgrind.out`.
    func live(daemon: String, dir: String) async throws {
        let upstream = try Child("\(self.bin)/wsbridge-testserver", ["--port", "0", "--no-echo"])
        defer { upstream.stop() }
        let port = Int(try await upstream.waitLine { $0.hasPrefix("listening ") }.dropFirst(10))!
        let socket = "\(dir)/order.sock"
        let config = "\(dir)/order.toml"
        let shipped = try String(contentsOfFile: self.config, encoding: .utf8)
        let heartbeat = #"interval = "20s""#
        guard shipped.contains(heartbeat) else { throw BenchError("\(self.config) has no \(heartbeat) (the heartbeat) to shorten") }
        try shipped.replacingOccurrences(of: heartbeat, with: #"interval = "1s""#).write(toFile: config, atomically: true, encoding: .utf8)
        let bridge = try Child(
            "/usr/bin/valgrind",
            [
                "--tool=callgrind", "-q", "--callgrind-out-file=\(dir)/callgrind.out", daemon, "--config", config, "--url", "ws://127.0.0.1:\(port)/",
                "--socket", socket,
            ]
        )
        _ = try await upstream.waitLine(seconds: 120) { $0.hasPrefix("connected ") }
        while !FileManager.default.fileExists(atPath: socket) { try await Task.sleep(for: .milliseconds(20)) }
        // Readers wait long for lines: the daemon runs some 50 times slower under callgrind.
        let readers = try startReaders(bin: self.bin, socket: socket, subscribers: 2, extra: ["--idle", "600"])
        for r in readers { _ = try await r.waitLine(seconds: 300) { $0 == "ready" } }
        upstream.send("flood \(self.messages) 100 0")
        for r in readers { _ = try await r.waitLine(seconds: 600) { $0.hasPrefix("{") } }
        // At a rate: a message per read, the common case.
        let ticker = try startReaders(bin: self.bin, socket: socket, subscribers: 1, extra: ["--idle", "600"])
        _ = try await ticker[0].waitLine(seconds: 300) { $0 == "ready" }
        upstream.send("ticker 200 100 \(self.messages)")
        _ = try await upstream.waitLine(seconds: 600) { $0.hasPrefix("ticker done") }
        await ticker[0].stopAndWait(kill: true)
        let ctl = "\(self.bin)/wsbridgectl"
        for arguments in [["status"], ["send", #"{"op":"ping"}"#]] {
            guard try Command.run(ctl, ["--socket", socket] + arguments, quiet: true) == 0 else { throw BenchError("wsbridgectl \(arguments[0]) failed") }
        }
        _ = try await upstream.waitLine(seconds: 60) { $0.hasPrefix("message ") }
        // Heartbeats (every second), then a reload; `status` answers once it is done.
        _ = try await upstream.waitLine(seconds: 120) { $0 == "ping" }
        _ = try await upstream.waitLine(seconds: 120) { $0 == "ping" }
        kill(bridge.pid, SIGHUP)
        guard try Command.run(ctl, ["--socket", socket, "status"], quiet: true) == 0 else { throw BenchError("wsbridgectl status after the reload failed") }
        await bridge.stopAndWait()
        for r in readers { await r.stopAndWait(kill: true) }
    }

    /// The function symbols of a binary: their sizes, and a lookup of the one an address is in.
    struct Functions {
        var sizes: [String: Int] = [:]
        var starts: [(UInt64, String)] = []

        /// The function whose code holds `address` (callgrind names an address it could not
        /// place in a symbol's range: code after a symbol's stated end, in the same section).
        func containing(_ address: UInt64) -> String? {
            var (lo, hi) = (0, self.starts.count)
            while lo < hi {
                let mid = (lo + hi) / 2
                if self.starts[mid].0 <= address { lo = mid + 1 } else { hi = mid }
            }
            return lo > 0 ? self.starts[lo - 1].1 : nil
        }
    }

    static func functions(of binary: String) throws -> Functions {
        let nm = Process()
        nm.executableURL = URL(fileURLWithPath: "/usr/bin/nm")
        nm.arguments = ["--defined-only", "-S", binary]
        let pipe = Pipe()
        nm.standardOutput = pipe
        try nm.run()
        let text = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        nm.waitUntilExit()
        guard nm.terminationStatus == 0 else { throw BenchError("nm \(binary) failed") }
        var functions = Functions()
        for line in text.split(separator: "\n") {
            // ADDRESS [SIZE] TYPE NAME (no size for some assembly), text symbols only (t, T, w, W).
            let f = line.split(separator: " ", maxSplits: 3)
            let sized = f.count == 4 && f[1].count > 1
            guard f.count >= 3, let address = UInt64(f[0], radix: 16) else { continue }
            let (type, name) = sized ? (f[2], String(f[3])) : (f[1], f[2...].joined(separator: " "))
            guard "tTwW".contains(type) else { continue }
            functions.sizes[name] = sized ? Int(f[1], radix: 16) ?? 0 : 0
            functions.starts.append((address, name))
        }
        functions.starts.sort { $0.0 < $1.0 }
        return functions
    }
}
