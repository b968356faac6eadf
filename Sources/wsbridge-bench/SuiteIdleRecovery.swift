import Foundation
import WSBridgeCore

#if canImport(Glibc)
    import Glibc
#endif

extension Environment {
    struct Idle {
        var seconds: Int
        var heartbeat: Int
        var wakeups: Int
        var rssKiB: Int
        var subscribers: Int
        var perSubscriberKiB: Double
    }

    /// wsbridged connected and quiet: its threads' context switches over `seconds` (every wakeup
    /// is one), its RSS, and what idle subscribers add.
    func idle(seconds: Int) async throws -> Idle {
        let socket = "\(self.dir)/idle.sock"
        let heartbeat = 20
        let daemon = try Child(self.daemon, ["--config", try self.wsbridgedConfig(socket: socket, extra: "[heartbeat]\ninterval = \"\(heartbeat)s\"")])
        _ = try await self.generator.waitLine { $0.hasPrefix("connected ") }
        try await Task.sleep(for: .seconds(2))  // let start-up settle; this is the measurement's baseline
        let before = try Self.contextSwitches(daemon.pid)
        try await Task.sleep(for: .seconds(seconds))
        // Per thread: a thread that started meanwhile counts from 0; one that ended is not seen.
        let wakeups = try Self.contextSwitches(daemon.pid).reduce(0) { $0 + $1.value - (before[$1.key] ?? 0) }
        let rss = try Self.rss(daemon.pid)
        let count = 500
        let idle = try Child("\(self.bin)/wsbridge-reader", ["--socket", socket, "--connections", "\(count)", "--stall"])
        _ = try await idle.waitLine(seconds: 60) { $0 == "ready" }
        try await Task.sleep(for: .seconds(1))
        let with = try Self.rss(daemon.pid)
        idle.closeInput()
        await idle.stopAndWait()
        await daemon.stopAndWait()
        _ = try await self.generator.waitLine { $0.hasPrefix("disconnected 0") }
        return Idle(
            seconds: seconds,
            heartbeat: heartbeat,
            wakeups: wakeups,
            rssKiB: rss,
            subscribers: count,
            perSubscriberKiB: Double(with - rss) / Double(count)
        )
    }

    struct Recovery {
        var interval: Double
        var deadline: Double
        var backoffBase: Double
        var detection: [Double]
        var reopen: [Double]
    }

    /// A silent upstream (the generator stops reading: no pongs) until wsbridged declares the link
    /// dead, against interval + deadline; and a dropped connection until the link is open again,
    /// against the backoff base (the first retry waits a random part of it).
    func recovery(runs: Int) async throws -> Recovery {
        let socket = "\(self.dir)/recovery.sock"
        let config = try self.wsbridgedConfig(
            socket: socket,
            extra: "[heartbeat]\ninterval = \"1s\"\ndeadline = \"1s\"\n[backoff]\nbase = \"100ms\"\ncap = \"1s\""
        )
        let daemon = try Child(self.daemon, ["--config", config])
        _ = try await self.generator.waitLine { $0.hasPrefix("connected ") }
        while !FileManager.default.fileExists(atPath: socket) { try await Task.sleep(for: .milliseconds(5)) }
        let states = try Child("/usr/bin/socat", ["-u", "UNIX-CONNECT:\(socket)", "-"])
        _ = try await states.waitLine { $0.contains(#""type":"hello""#) }
        var detection: [Double] = []
        var reopen: [Double] = []
        for _ in 0..<max(1, runs) {
            let start = ContinuousClock.now
            self.generator.send("stall on")
            _ = try await states.waitLine(seconds: 30) { $0.contains(#""type":"state""#) && $0.contains("heartbeat") }
            detection.append((ContinuousClock.now - start).seconds)
            _ = try await states.waitLine(seconds: 30) { $0.contains(#""state":"open""#) }
            self.generator.send("stall off")
            _ = try await self.generator.waitLine { $0.hasPrefix("stall off") }

            let dropped = ContinuousClock.now
            self.generator.send("drop")
            _ = try await states.waitLine(seconds: 30) { $0.contains(#""state":"open""#) }
            reopen.append((ContinuousClock.now - dropped).seconds)
        }
        await states.stopAndWait()
        await daemon.stopAndWait()
        return Recovery(interval: 1, deadline: 1, backoffBase: 0.1, detection: detection, reopen: reopen)
    }

    /// Each thread's context switches so far (voluntary and not): every wakeup is one.
    static func contextSwitches(_ pid: Int32) throws -> [String: Int] {
        let tasks = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")
        var counts: [String: Int] = [:]
        for task in tasks {
            var total = 0
            let status = (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/status", encoding: .utf8)) ?? ""
            for line in status.split(separator: "\n") where line.hasPrefix("voluntary_ctxt_switches") || line.hasPrefix("nonvoluntary_ctxt_switches") {
                total += Int(line.split(separator: "\t").last.map { $0.trimmingCharacters(in: .whitespaces) } ?? "") ?? 0
            }
            counts[task] = total
        }
        return counts
    }

    static func rss(_ pid: Int32) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
        return Int(line.split(separator: " ").dropFirst().first { Int($0) != nil } ?? "0") ?? 0
    }
}

enum Format {
    static func human(_ v: Double) -> String {
        v >= 1e6 ? String(format: "%.2fM", v / 1e6) : v >= 1e3 ? String(format: "%.0fk", v / 1e3) : String(format: "%.0f", v)
    }

    static func ms(_ microseconds: Double) -> String {
        String(format: "%.2f ms", microseconds / 1000)
    }

    static func median(_ values: [Double]) -> Double {
        let s = values.sorted()
        return s.isEmpty ? 0 : s[s.count / 2]
    }

    static func spread(_ values: [Double], _ f: (Double) -> String) -> String {
        "\(f(Self.median(values))) (\(f(values.min() ?? 0))–\(f(values.max() ?? 0)))"
    }
}

/// The suite's table and its ratios.
struct Report {
    var scenarios: [Suite.Scenario]
    var samples: [[Suite.Sample]]
    var runs: Int
    var idle: Environment.Idle?
    var recovery: Environment.Recovery?

    func median(
        _ group: String, _ bridge: Suite.Bridge, _ subscribers: Int, readers: Suite.ReaderKind = .swift, stalled: Int = 0, _ key: (Suite.Sample) -> Double
    )
        -> Double?
    {
        guard
            let i = self.scenarios.firstIndex(where: {
                $0.group == group && $0.bridge == bridge && $0.subscribers == subscribers && $0.readers == readers && $0.stalled == stalled
            })
        else { return nil }
        return Format.median(self.samples[i].map(key))
    }

    func ratio(_ a: Double?, _ b: Double?, target: String) -> String {
        guard let a, let b, b > 0 else { return "" }
        return String(format: "%.2f×", a / b) + " (target \(target))"
    }

    func print() {
        Swift.print("")
        Swift.print("wsbridge-bench suite: median (min–max) of \(self.runs) runs; readers in separate processes; release build")
        Swift.print("| scenario | deliveries/s | MB/s | lost | latency p50 | latency p99 | bridge CPU µs/msg |")
        Swift.print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for (scenario, s) in zip(self.scenarios, self.samples) where !s.isEmpty {
            let what = scenario.rate > 0 ? "\(scenario.group) \(scenario.rate) msg/s" : "\(scenario.group) \(scenario.size) B"
            Swift.print(
                "| \(what): \(scenario.name) | \(Format.spread(s.map(\.deliveriesPerSecond), Format.human)) | "
                    + "\(Format.spread(s.map { $0.bytesPerSecond / 1e6 }) { String(format: "%.0f", $0) }) | "
                    + "\(Format.spread(s.map(\.lostPercent)) { String(format: "%.1f %%", $0) }) | "
                    + "\(Format.spread(s.map(\.p50), Format.ms)) | \(Format.spread(s.map(\.p99), Format.ms)) | "
                    + ([.wsbridged, .wsbridgedBaseline, .python, .fleet, .fleetBatched, .face, .pythonRelay].contains(scenario.bridge)
                        ? Format.spread(s.map(\.cpuPerMessage)) { String(format: "%.2f", $0) } : "")
                    + " |"
            )
        }
        Swift.print("")
        Swift.print("Ratios (medians):")
        let d = { (g: String, b: Suite.Bridge, n: Int) in self.median(g, b, n, \.deliveriesPerSecond) }
        if let w = d("flat", .wsbridged, 1) {
            Swift.print("- flat, 1 subscriber: wsbridged / direct = \(self.ratio(w, d("flat", .direct, 1), target: "≥ 0.90"))")
        }
        for n in [10, 100] {
            if let w = d("flat", .wsbridged, n) {
                Swift.print("- flat, \(n) subscribers: wsbridged / Python bridge = \(self.ratio(w, d("flat", .python, n), target: "≥ 5"))")
            }
        }
        if let w = d("flat", .wsbridged, 100) {
            Swift.print("- flat, 100 subscribers: wsbridged / raw copy = \(self.ratio(w, d("flat", .rawCopy, 100), target: "≥ 0.65"))")
        }
        if let f = d("face", .face, 100) {
            Swift.print("- face, 100 subscribers: WebSocket face / NDJSON socket = \(self.ratio(f, d("face", .wsbridged, 100), target: "≥ 0.80"))")
            Swift.print("- face, 100 subscribers: WebSocket face / Python websockets relay = \(self.ratio(f, d("face", .pythonRelay, 100), target: "> 1"))")
        }
        if let w = self.median("large", .wsbridged, 10, \.bytesPerSecond) {
            Swift.print(
                "- 4 KiB, 10 subscribers: wsbridged / raw copy, bytes/s = \(self.ratio(w, self.median("large", .rawCopy, 10, \.bytesPerSecond), target: "≥ 0.80"))"
            )
        }
        if let p99 = self.median("rate", .wsbridged, 100, \.p99), let lost = self.median("rate", .wsbridged, 100, \.lostPercent) {
            let py = self.median("rate", .wsbridged, 100, readers: .python, \.p99) ?? 0
            Swift.print(
                "- 10k msg/s × 100: wsbridged p99 \(Format.ms(p99)) with Swift readers (target < 1 ms), \(Format.ms(py)) with Python readers (target < 5 ms), \(String(format: "%.2f", lost)) % lost (target 0)"
            )
        }
        if let floor = self.median("rate", .rawCopy, 100, \.p99) {
            Swift.print("- 10k msg/s × 100: raw copy p99 \(Format.ms(floor)) (the same readers fed by one process with no upstream: the floor on this machine)")
        }
        if let all = self.median("stalled", .wsbridged, 100, { $0.deliveriesPerSecond / 100 }),
            let some = self.median("stalled", .wsbridged, 99, stalled: 1, { $0.deliveriesPerSecond / 99 })
        {
            Swift.print(String(format: "- 99 reading + 1 stalled / 100 reading, per reader: %.0f %% (target within 10 %%)", some / all * 100))
        }
        self.printJournal()
        self.printFleet()
        for (i, scenario) in self.scenarios.enumerated() where scenario.bridge == .wsbridgedBaseline {
            let this = self.samples[i - 1]
            let base = self.samples[i]
            let what = "\(scenario.group) \(scenario.rate > 0 ? "\(scenario.rate) msg/s" : "\(scenario.size) B") \(scenario.subscribers) subs"
            let deliveries = Format.median(this.map(\.deliveriesPerSecond)) / max(Format.median(base.map(\.deliveriesPerSecond)), 1)
            let cpu = Format.median(this.map(\.cpuPerMessage)) / max(Format.median(base.map(\.cpuPerMessage)), 1e-9)
            Swift.print(
                "- \(what)\(scenario.readers == .python ? ", Python readers" : ""): this build / baseline build: "
                    + String(format: "deliveries %.2f×, CPU per message %.2f×", deliveries, cpu))
        }
        if let idle = self.idle {
            Swift.print(
                "- idle \(idle.seconds) s (heartbeat every \(idle.heartbeat) s): \(idle.wakeups) context switches; RSS \(String(format: "%.1f", Double(idle.rssKiB) / 1024)) MiB (target ≤ 18); "
                    + String(format: "%.1f KiB", idle.perSubscriberKiB) + " per idle subscriber (\(idle.subscribers) connected; target < 64)"
            )
        }
        if let r = self.recovery {
            Swift.print(
                "- silent upstream → dead link: \(Format.spread(r.detection) { String(format: "%.2f s", $0) }) (interval + deadline = \(r.interval + r.deadline) s); "
                    + "dropped → open again: \(Format.spread(r.reopen) { String(format: "%.3f s", $0) }) (backoff base \(r.backoffBase) s)"
            )
        }
    }
}
