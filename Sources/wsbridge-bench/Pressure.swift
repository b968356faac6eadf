import ArgumentParser
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Readers in separate processes, flat out, default configuration: wsbridged against the Python
/// bridge a user would write instead (scripts/bench-python-bridge.py: the simple form with a write
/// per line, and a batched form) at 10 and 100 subscribers, and 99 reading subscribers plus 1
/// stalled one against 100 reading ones. Every scenario runs
/// `--runs` times, interleaved; the table gives medians and min–max.
struct Pressure: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Slow and stalled subscribers in separate processes: wsbridged against a simple Python bridge."
    )

    @Option(help: "Folder with wsbridged, wsbridge-testserver and wsbridge-reader (a release build).")
    var bin: String

    @Option(help: "Python with `websockets` (for the baseline bridge).")
    var python = ".venv/bin/python"

    @Option(help: "The baseline bridge script.")
    var bridgeScript = "scripts/bench-python-bridge.py"

    @Option(help: "Messages per burst.")
    var messages = 50000

    @Option(help: "Message size in bytes.")
    var size = 100

    @Option(help: "Runs of every scenario (the table shows the median).")
    var runs = 5

    @Option(help: "Reader processes that share the subscribers of a scenario.")
    var readerProcesses = 4

    enum Bridge: String {
        case wsbridged
        case python = "Python bridge (simple)"
        case pythonBatched = "Python bridge (batched)"
    }

    struct Scenario {
        var bridge: Bridge
        var readers: Int
        var stalled = 0
        var name: String {
            "\(self.bridge.rawValue) → \(self.readers) reading" + (self.stalled > 0 ? " + \(self.stalled) stalled" : "")
        }
    }

    struct Result {
        var deliveriesPerSecond: Double
        var perReader: Double
        var lostPercent: Double
    }

    func run() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("wsbridge-pressure-\(getpid())").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let generator = try Child("\(self.bin)/wsbridge-testserver", ["--port", "0", "--no-echo"])
        defer { generator.stop() }
        let port = Int(try await generator.waitLine { $0.hasPrefix("listening ") }.dropFirst(10))!

        let scenarios = [
            Scenario(bridge: .wsbridged, readers: 10), Scenario(bridge: .python, readers: 10),
            Scenario(bridge: .pythonBatched, readers: 10),
            Scenario(bridge: .wsbridged, readers: 100), Scenario(bridge: .python, readers: 100),
            Scenario(bridge: .pythonBatched, readers: 100),
            Scenario(bridge: .wsbridged, readers: 99, stalled: 1),
        ]
        var results = [[Result]](repeating: [], count: scenarios.count)
        for run in 1...self.runs {
            for (i, scenario) in scenarios.enumerated() {
                let r = try await self.measure(scenario, generator: generator, port: port, dir: dir, run: run)
                results[i].append(r)
                print(
                    "run \(run) \(scenario.name): \(Int(r.deliveriesPerSecond)) deliveries/s, \(Int(r.perReader)) per reader, \(String(format: "%.1f", r.lostPercent)) % lost"
                )
            }
        }
        print("")
        print("wsbridge-bench pressure: \(self.messages) × \(self.size)-byte messages per burst, flat out, default queues,")
        print("readers in \(self.readerProcesses) separate processes; median (min–max) of \(self.runs) runs")
        print("| scenario | deliveries/s | per reader msgs/s | lost |")
        print("| --- | ---: | ---: | ---: |")
        for (scenario, rs) in zip(scenarios, results) {
            print(
                "| \(scenario.name) | \(Self.spread(rs.map(\.deliveriesPerSecond))) | \(Self.spread(rs.map(\.perReader))) | \(Self.spread(rs.map(\.lostPercent), unit: " %")) |"
            )
        }
        let median = results.map { Self.median($0.map(\.deliveriesPerSecond)) }
        let perReader = results.map { Self.median($0.map(\.perReader)) }
        print("")
        print(
            String(
                format: "wsbridged / Python bridge (simple): %.1f× at 10 subscribers, %.1f× at 100; / (batched): %.1f× and %.1f×",
                median[0] / median[1], median[3] / median[4], median[0] / median[2], median[3] / median[5]
            )
        )
        print(String(format: "99 reading + 1 stalled / 100 reading, per reader: %.0f %%", perReader[6] / perReader[3] * 100))
    }

    /// One burst through a freshly started bridge to freshly started reader processes.
    func measure(_ scenario: Scenario, generator: Child, port: Int, dir: String, run: Int) async throws -> Result {
        let socket = "\(dir)/\(run)-\(scenario.name.filter(\.isLetter))-\(scenario.readers).sock"
        let bridge: Child
        switch scenario.bridge {
        case .wsbridged:
            let config = "\(dir)/wsbridged.toml"
            try """
            [upstream]
            url = "ws://127.0.0.1:\(port)/"
            compression = false
            [reachability]
            enabled = false
            [local]
            socket = "\(socket)"
            [log]
            level = "warning"
            """.write(toFile: config, atomically: true, encoding: .utf8)
            bridge = try Child("\(self.bin)/wsbridged", ["--config", config])
        case .python:
            bridge = try Child(self.python, [self.bridgeScript, "--simple", "ws://127.0.0.1:\(port)/", socket])
        case .pythonBatched:
            bridge = try Child(self.python, [self.bridgeScript, "ws://127.0.0.1:\(port)/", socket])
        }
        _ = try await generator.waitLine { $0.hasPrefix("connected ") }
        while !FileManager.default.fileExists(atPath: socket) { try await Task.sleep(for: .milliseconds(10)) }

        var readers: [Child] = []
        let per = (scenario.readers + self.readerProcesses - 1) / self.readerProcesses
        var remaining = scenario.readers
        while remaining > 0 {
            let n = min(per, remaining)
            readers.append(try Child("\(self.bin)/wsbridge-reader", ["--socket", socket, "--connections", "\(n)"]))
            remaining -= n
        }
        var stalled: [Child] = []
        if scenario.stalled > 0 {
            stalled.append(try Child("\(self.bin)/wsbridge-reader", ["--socket", socket, "--connections", "\(scenario.stalled)", "--stall"]))
        }
        for r in readers + stalled { _ = try await r.waitLine { $0 == "ready" } }

        let start = monotonicNanos()
        generator.send("burst \(self.messages) \(self.size)")
        generator.send("send __end__")
        var messages = 0
        var lost = 0
        var last: UInt64 = start
        for r in readers {
            let line = try await r.waitLine(seconds: 300) { $0.hasPrefix("{") }
            let json = try JSONSerialization.jsonObject(with: Data(line.utf8)) as! [String: Any]
            messages += json["messages"] as! Int
            lost += (json["lost"] as! Int) + (json["gaps"] as! Int)
            last = max(last, UInt64(json["last_ns"] as! Int))
        }
        _ = try await generator.waitLine { $0.hasPrefix("burst done") }
        for s in stalled { s.closeInput() }
        for child in [bridge] + readers + stalled { await child.stopAndWait() }
        _ = try await generator.waitLine { $0.hasPrefix("disconnected 0") }
        let seconds = Double(last - start) / 1e9
        let expected = Double((self.messages + 1) * scenario.readers)
        return Result(
            deliveriesPerSecond: Double(messages) / seconds,
            perReader: Double(messages) / seconds / Double(scenario.readers),
            lostPercent: max(0, expected - Double(messages)) / expected * 100
        )
    }

    static func median(_ values: [Double]) -> Double {
        let s = values.sorted()
        return s.isEmpty ? 0 : s[s.count / 2]
    }

    static func spread(_ values: [Double], unit: String = "") -> String {
        func f(_ v: Double) -> String { unit.isEmpty ? Self.human(v) : String(format: "%.1f", v) + unit }
        return "\(f(Self.median(values))) (\(f(values.min() ?? 0))–\(f(values.max() ?? 0)))"
    }

    static func human(_ v: Double) -> String {
        v >= 1e6 ? String(format: "%.2fM", v / 1e6) : v >= 1e3 ? String(format: "%.0fk", v / 1e3) : String(format: "%.0f", v)
    }
}

func monotonicNanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}
