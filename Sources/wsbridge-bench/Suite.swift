import ArgumentParser
import Foundation
import WSBridgeCore

#if canImport(Glibc)
    import Glibc
#endif

/// The benchmark suite: every scenario of docs/performance.md, each repeated `--runs` times
/// (interleaved with its baselines), readers in separate processes, the generator
/// (wsbridge-testserver's `flood`: pre-encoded frames in 64 KiB batches) faster than any bridge.
/// Prints one table: medians with min–max, and each bridge's ratio to its baselines.
struct Suite: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "All scenarios against their baselines (direct, a simple Python bridge, raw copy), in one run."
    )

    @OptionGroup var builds: Builds

    @Option(help: "Python with `websockets`.")
    var python = ".build/venv/bin/python"

    @Option(help: "Folder with python_bridge.py and reader.py.")
    var scripts = "scripts/bench"

    @Option(help: "Runs of every scenario.")
    var runs = 5

    @Option(help: "Deliveries per flat-out run at 100 B (messages × subscribers); a tenth at 4 KiB, a third for the Python bridge.")
    var deliveries = 1_000_000

    @Option(help: "Seconds of the idle measurement.")
    var idleSeconds = 60

    @Option(help: "Only these scenario groups (comma-separated): flat, large, rate, stalled, face, journal, fleet, idle, recovery.")
    var only: String?

    enum Bridge: String {
        case wsbridged
        case wsbridgedBaseline = "wsbridged (baseline build)"
        case python = "Python bridge"
        case rawCopy = "raw copy"
        case direct = "direct"
        case fleet = "wsbridged bridge → JetStream → follower"
        case fleetBatched = "wsbridged bridge (fleet.batch = 100) → JetStream → follower"
        case natsBaseline = "NATS C client → JetStream → ordered consumer (baseline)"
        case natsBaselineIDs = "NATS C client with a bridge's ids → JetStream → ordered consumer (baseline)"
        case natsBaselineExpect = "NATS C client expecting the last seq → JetStream → ordered consumer (baseline)"
        case face = "wsbridged WebSocket face"
        case pythonRelay = "Python websockets relay"
    }

    enum ReaderKind: String {
        case swift = "Swift readers"
        case python = "Python readers"
    }

    struct Scenario {
        var group: String
        var bridge: Bridge
        var subscribers: Int
        var size: Int = 100
        var rate = 0
        var seconds = 0
        var stalled = 0
        var readers = ReaderKind.swift
        /// `[journal]` on with this fsync policy (nil: off).
        var journal: String?
        /// One more consumer replays the whole prefilled journal meanwhile (SuiteJournal.swift).
        var replay = false
        /// That consumer runs at nice 19: what is left is the daemon's own share of the cost.
        var replayNiced = false

        var messages: Int { self.rate > 0 ? self.rate * self.seconds : 0 }
        var name: String {
            var s = "\(self.bridge.rawValue), \(self.subscribers) sub\(self.subscribers == 1 ? "" : "s")"
            if self.stalled > 0 { s += " + \(self.stalled) stalled" }
            if self.readers == .python { s += ", Python readers" }
            if let journal = self.journal { s += ", journal fsync \(journal)" }
            if self.replay { s += " + 1 replaying the journal" + (self.replayNiced ? " (that reader at nice 19)" : "") }
            return s
        }
    }

    struct Sample {
        var deliveriesPerSecond: Double
        var bytesPerSecond: Double
        var lostPercent: Double
        var p50: Double
        var p99: Double
        /// The bridge's own CPU time per upstream message (user + system), in microseconds.
        var cpuPerMessage: Double
        /// With a journal: its bytes on disk per upstream message.
        var journalBytesPerMessage = 0.0
        /// With a replaying consumer: what it read from the journal, MB/s.
        var replayMBPerSecond = 0.0
    }

    var groups: Set<String> {
        Set((self.only ?? "flat,large,rate,stalled,face,journal,fleet,idle,recovery").split(separator: ",").map(String.init))
    }

    func run() async throws {
        let started = ContinuousClock.now
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("wsbridge-suite-\(getpid())").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let generator = try Child("\(self.builds.bin)/wsbridge-testserver", ["--port", "0", "--no-echo", "--max-frame", "1048576"])
        defer { generator.stop() }
        let port = Int(try await generator.waitLine { $0.hasPrefix("listening ") }.dropFirst(10))!
        let env = Environment(
            bin: self.builds.bin, daemon: self.builds.wsbridged, baselineDaemon: self.builds.baselineDaemon ?? "", python: self.python,
            scripts: self.scripts, dir: dir, port: port,
            generator: generator)

        var scenarios: [Scenario] = []
        if self.groups.contains("flat") {
            scenarios.append(Scenario(group: "flat", bridge: .direct, subscribers: 1))
            for n in [1, 10, 100] {
                scenarios += [.wsbridged, .python, .rawCopy].map { Scenario(group: "flat", bridge: $0, subscribers: n) }
            }
        }
        if self.groups.contains("large") {
            scenarios += [.wsbridged, .python, .rawCopy].map { Scenario(group: "large", bridge: $0, subscribers: 10, size: 4096) }
        }
        if self.groups.contains("rate") {
            scenarios += [
                Scenario(group: "rate", bridge: .wsbridged, subscribers: 100, rate: 10_000, seconds: 3),
                Scenario(group: "rate", bridge: .wsbridged, subscribers: 100, rate: 10_000, seconds: 3, readers: .python),
                Scenario(group: "rate", bridge: .python, subscribers: 100, rate: 10_000, seconds: 3),
                Scenario(group: "rate", bridge: .python, subscribers: 100, rate: 10_000, seconds: 3, readers: .python),
                Scenario(group: "rate", bridge: .rawCopy, subscribers: 100, rate: 10_000, seconds: 3),
            ]
        }
        if self.groups.contains("stalled") {
            scenarios += [
                Scenario(group: "stalled", bridge: .wsbridged, subscribers: 100),
                Scenario(group: "stalled", bridge: .wsbridged, subscribers: 99, stalled: 1),
            ]
        }
        if self.groups.contains("face") {
            // The WebSocket face flat out to 100 apps beside the NDJSON socket to 100 subscribers,
            // and a Python `websockets` relay of the same feed to the same 100 apps (frames read by
            // `wsbridge-reader --websocket`).
            scenarios += [.wsbridged, .face, .pythonRelay].map { Scenario(group: "face", bridge: $0, subscribers: 100) }
        }
        if self.groups.contains("journal") {
            scenarios += Self.journalScenarios
            try await env.prefillJournal()
        }
        var fleet: Environment.FleetServer?
        if self.groups.contains("fleet") {
            scenarios += Self.fleetScenarios
            fleet = try await env.startFleet()
        }
        defer { fleet?.server.stop() }
        if self.builds.baselineDaemon != nil {
            scenarios = scenarios.flatMap { s -> [Scenario] in
                guard s.bridge == .wsbridged, s.journal == nil else { return [s] }
                var twin = s
                twin.bridge = .wsbridgedBaseline
                return [s, twin]
            }
        }
        var samples = [[Sample]](repeating: [], count: scenarios.count)
        for run in 1...max(1, self.runs) where !scenarios.isEmpty {
            for (i, scenario) in scenarios.enumerated() {
                let began = ContinuousClock.now
                let s =
                    if let fleet, scenario.group == "fleet" {
                        try await env.measureFleet(
                            scenario, messages: scenario.rate > 0 ? scenario.messages : self.deliveries / 10, run: run, fleet: fleet)
                    } else {
                        try await env.measure(scenario, deliveries: self.deliveries, run: run)
                    }
                samples[i].append(s)
                emitLine(
                    "run \(run) \(scenario.group): \(scenario.name): \(Format.human(s.deliveriesPerSecond)) deliveries/s, "
                        + "\(String(format: "%.1f", s.lostPercent)) % lost, p99 \(Format.ms(s.p99)) "
                        + "[\(String(format: "%.1f", (ContinuousClock.now - began).seconds)) s]"
                )
            }
        }
        var idle: Environment.Idle?
        if self.groups.contains("idle") { idle = try await env.idle(seconds: self.idleSeconds) }
        var recovery: Environment.Recovery?
        if self.groups.contains("recovery") { recovery = try await env.recovery(runs: self.runs) }

        Report(scenarios: scenarios, samples: samples, runs: self.runs, idle: idle, recovery: recovery).print()
        print("")
        print("suite: \(Int((ContinuousClock.now - started).seconds)) s")
    }
}

/// Processes and files of one suite run.
struct Environment {
    var bin: String
    var daemon: String
    var baselineDaemon: String
    /// A process's CPU time so far (user + system), from /proc/PID/stat.
    static func cpuSeconds(_ pid: Int32) -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") else { return 0 }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command: state is field 3, utime 14 and stime 15 (1-based, man 5 proc).
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    var python: String
    var scripts: String
    var dir: String
    var port: Int
    var generator: Child
    var url: String { "ws://127.0.0.1:\(self.port)/" }

    func wsbridgedConfig(socket: String, extra: String = "") throws -> String {
        let path = "\(self.dir)/wsbridged.toml"
        try """
        [upstream]
        url = "\(self.url)"
        compression = false
        [reachability]
        enabled = false
        [local]
        socket = "\(socket)"
        \(extra)
        [log]
        level = "warning"
        """.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// One run: a fresh bridge, fresh readers, one flood (or the raw copy's own writes).
    func measure(_ scenario: Suite.Scenario, deliveries: Int, run: Int) async throws -> Suite.Sample {
        let socket = "\(self.dir)/r\(run)-\(scenario.group)-\(scenario.bridge.rawValue.filter(\.isLetter))-\(scenario.subscribers).sock"
        // Sized so that every flat-out run takes about a second: a tenth of the deliveries at
        // 4 KiB, a third through the Python bridge.
        var budget = deliveries
        if scenario.size > 1024 { budget /= 10 }
        if scenario.bridge == .python || scenario.bridge == .pythonRelay { budget /= 3 }
        let messages = scenario.rate > 0 ? scenario.messages : max(2000, budget / max(1, scenario.subscribers + scenario.stalled))
        var bridge: Child?
        switch scenario.bridge {
        case .wsbridged:
            bridge = try Child(self.daemon, ["--config", try self.wsbridgedConfig(socket: socket, extra: self.journalConfig(scenario, run: run))])
        case .wsbridgedBaseline:
            bridge = try Child(self.baselineDaemon, ["--config", try self.wsbridgedConfig(socket: socket)])
        case .face:
            let extra = "[local.websocket]\nsocket = \"\(socket)\""
            bridge = try Child(self.daemon, ["--config", try self.wsbridgedConfig(socket: socket + ".ndjson", extra: extra)])
        case .pythonRelay:
            bridge = try Child(self.python, ["\(self.scripts)/python_ws_relay.py", self.url, socket])
        case .python:
            bridge = try Child(self.python, ["\(self.scripts)/python_bridge.py", "--simple", self.url, socket])
        case .rawCopy:
            bridge = try Child(
                "\(self.bin)/wsbridge-bench",
                [
                    "raw-copy", "--socket", socket, "--connections", "\(scenario.subscribers)", "--messages", "\(messages)", "--size",
                    "\(scenario.size)", "--rate", "\(scenario.rate)",
                ]
            )
        case .direct:
            bridge = nil
        case .fleet, .fleetBatched, .natsBaseline, .natsBaselineIDs, .natsBaselineExpect:
            throw BenchError("a fleet scenario runs in measureFleet")
        }
        if [.wsbridged, .wsbridgedBaseline, .python, .face, .pythonRelay].contains(scenario.bridge) {
            _ = try await self.generator.waitLine { $0.hasPrefix("connected ") }
        }
        if scenario.bridge != .direct {
            while !FileManager.default.fileExists(atPath: socket) { try await Task.sleep(for: .milliseconds(5)) }
        }
        // Readers: up to 4 processes share the subscribers (Swift), or one asyncio process (Python).
        var readers: [Child] = []
        if scenario.bridge == .direct {
            readers.append(try Child("\(self.bin)/wsbridge-reader", ["--upstream", self.url]))
        } else if scenario.readers == .python {
            readers.append(try Child(self.python, ["\(self.scripts)/reader.py", socket, "\(scenario.subscribers)"]))
        } else {
            let frames = scenario.bridge == .face || scenario.bridge == .pythonRelay
            readers = try startReaders(bin: self.bin, socket: socket, subscribers: scenario.subscribers, extra: frames ? ["--websocket"] : [])
        }
        var stalled: [Child] = []
        if scenario.stalled > 0 {
            stalled.append(try Child("\(self.bin)/wsbridge-reader", ["--socket", socket, "--connections", "\(scenario.stalled)", "--stall"]))
        }
        let replayArguments = ["\(self.bin)/wsbridge-reader", "--socket", socket, "--since", "0", "--idle", "120"]
        let replayer =
            scenario.replay
            ? try
                (scenario.replayNiced
                ? Child("/usr/bin/nice", ["-n", "19"] + replayArguments) : Child(replayArguments[0], Array(replayArguments.dropFirst()))) : nil
        for r in readers + stalled + (replayer.map { [$0] } ?? []) { _ = try await r.waitLine(seconds: 60) { $0 == "ready" } }
        let replayStarted = ContinuousClock.now
        if scenario.bridge == .direct { _ = try await self.generator.waitLine { $0.hasPrefix("connected ") } }

        if scenario.bridge != .rawCopy {
            self.generator.send("flood \(messages) \(scenario.size) \(scenario.rate)")
        }
        var received = 0
        var first = UInt64.max
        var last: UInt64 = 0
        var p50: [Double] = []
        var p99: [Double] = []
        for r in readers {
            let line = try await r.waitLine(seconds: 600) { $0.hasPrefix("{") }
            let json = try JSONSerialization.jsonObject(with: Data(line.utf8)) as! [String: Any]
            received += json["messages"] as! Int
            first = min(first, UInt64(json["first_ns"] as! Int))
            last = max(last, UInt64(json["last_ns"] as! Int))
            if (json["latency_count"] as! Int) > 0 {
                p50.append(Double(json["p50_us"] as! Int))
                p99.append(Double(json["p99_us"] as! Int))
            }
        }
        if scenario.bridge != .rawCopy { _ = try await self.generator.waitLine(seconds: 600) { $0.hasPrefix("flood done") } }
        let cpu = bridge.map { Self.cpuSeconds($0.pid) } ?? 0
        let replayMB = try await self.replayed(replayer, since: replayStarted)
        for s in stalled { s.closeInput() }
        if let bridge { await bridge.stopAndWait(kill: [.python, .pythonRelay, .rawCopy].contains(scenario.bridge)) }
        for child in readers + stalled { await child.stopAndWait(kill: true) }
        if scenario.bridge != .rawCopy {
            _ = try await self.generator.waitLine(seconds: 60) { $0.hasPrefix("disconnected 0") }
        }
        let seconds = max(Double(last &- first) / 1e9, 1e-6)
        let expected = Double((messages + 1) * scenario.subscribers)
        let journalBytes = scenario.journal != nil && !scenario.replay ? self.journalBytes(scenario, run: run) : 0
        return Suite.Sample(
            deliveriesPerSecond: Double(received) / seconds,
            bytesPerSecond: Double(received) * Double(scenario.size) / seconds,
            lostPercent: max(0, expected - Double(received)) / expected * 100,
            // Across reader processes: the worst one's figure.
            p50: p50.max() ?? 0,
            p99: p99.max() ?? 0,
            cpuPerMessage: cpu / Double(messages) * 1e6,
            journalBytesPerMessage: Double(journalBytes) / Double(messages + 1),
            replayMBPerSecond: replayMB
        )
    }
}
