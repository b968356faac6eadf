import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// `suite --only fleet` (docs/fleet.md): the generator's flood through a bridge with `[fleet]`
/// into a JetStream stream (Debian's nats-server, JetStream on, file storage, on loopback) and out
/// of a follower's socket to a reader, beside the baseline: the same messages published into the
/// same stream through the same NATS C client and read back by an ordered consumer in one process
/// (scripts/bench/nats_baseline.c), no WebSocket, no bridge, no Unix socket. Flat out (what
/// arrives, nothing lost) and at 10,000 a second (end-to-end latency, from the generator's stamp
/// to the reader).
extension Environment {
    struct FleetServer {
        let server: Child
        let url: String
        /// The baseline program, compiled for this run.
        let baseline: String
    }

    static let fleetStream = "BENCH"
    static let fleetSubject = "bench.x"

    /// nats-server with JetStream in the run's folder, the stream, and the baseline compiled.
    func startFleet() async throws -> FleetServer {
        let baseline = "\(self.dir)/nats_baseline"
        let cc = Process()
        cc.executableURL = URL(fileURLWithPath: "/usr/bin/cc")
        cc.arguments = ["-O2", "-o", baseline, "\(self.scripts)/nats_baseline.c", "-lnats", "-lpthread"]
        try cc.run()
        cc.waitUntilExit()
        guard cc.terminationStatus == 0 else { throw BenchError("compiling \(self.scripts)/nats_baseline.c (needs libnats-dev: scripts/setup)") }
        let port = try Self.freePort()
        let server = try Child("/usr/sbin/nats-server", ["-js", "-a", "127.0.0.1", "-p", "\(port)", "-sd", "\(self.dir)/jetstream"])
        let url = "nats://127.0.0.1:\(port)"
        // The stream, once the server listens (the baseline's `create` connects and makes it).
        for attempt in 0..<100 {
            let create = try Child(baseline, [url, "create", Self.fleetStream, Self.fleetSubject])
            if (try? await create.waitLine(seconds: 5) { $0.hasPrefix("{") }) != nil { break }
            await create.stopAndWait(kill: true)
            guard attempt < 99 else { throw BenchError("nats-server did not start on port \(port)") }
            try await Task.sleep(for: .milliseconds(100))
        }
        return FleetServer(server: server, url: url, baseline: baseline)
    }

    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw BenchError("no free port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// `wsbridgectl status --json` of the daemon at `socket` until `done` holds of it.
    func awaitStatus(_ socket: String, _ what: String, _ done: ([String: Any]) -> Bool) async throws {
        for _ in 0..<600 {
            let ctl = Process()
            let out = Pipe()
            ctl.executableURL = URL(fileURLWithPath: "\(self.bin)/wsbridgectl")
            ctl.arguments = ["--socket", socket, "status", "--json"]
            ctl.standardOutput = out
            ctl.standardError = FileHandle.nullDevice
            try ctl.run()
            let data = out.fileHandleForReading.readDataToEndOfFile()
            ctl.waitUntilExit()
            if let json = try? JSONSerialization.jsonObject(with: data) as? [String: Any], done(json) { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw BenchError("\(what): not within 30 s")
    }

    /// One fleet run: the bridge and the follower (fresh daemons), or the baseline.
    func measureFleet(_ scenario: Suite.Scenario, messages: Int, run: Int, fleet: FleetServer) async throws -> Suite.Sample {
        var daemons: [Child] = []
        var readers: [Child] = []
        let result: String
        if scenario.bridge != .fleet && scenario.bridge != .fleetBatched {
            let ids = scenario.bridge == .natsBaselineIDs ? ["ids"] : scenario.bridge == .natsBaselineExpect ? ["expect"] : []
            let baseline = try Child(
                fleet.baseline, [fleet.url, "run", Self.fleetStream, Self.fleetSubject, "\(messages)", "\(scenario.size)", "\(scenario.rate)"] + ids)
            result = try await baseline.waitLine(seconds: 600) { $0.hasPrefix("{") }
            await baseline.stopAndWait()
        } else {
            let section = "[fleet]\nservers = [\"\(fleet.url)\"]\nstream = \"\(Self.fleetStream)\"\nsubject = \"\(Self.fleetSubject)\"\n"
            // The bridge batches (followers take any stream alike).
            let batch = scenario.bridge == .fleetBatched ? "batch = 100\n" : ""
            let bridgeSocket = "\(self.dir)/fleet-bridge-\(run)-\(scenario.rate).sock"
            let bridge = try Child(self.daemon, ["--config", try self.wsbridgedConfig(socket: bridgeSocket, extra: section + batch)])
            daemons.append(bridge)
            _ = try await self.generator.waitLine { $0.hasPrefix("connected ") }
            try await self.awaitStatus(bridgeSocket, "the bridge's fleet connected") { ($0["fleet"] as? [String: Any])?["state"] as? String == "connected" }
            let socket = "\(self.dir)/fleet-follower-\(run)-\(scenario.rate).sock"
            let config = "\(self.dir)/follower.toml"
            try """
            [reachability]
            enabled = false
            [local]
            socket = "\(socket)"
            \(section)role = "follower"
            [log]
            level = "warning"
            """.write(toFile: config, atomically: true, encoding: .utf8)
            let follower = try Child(self.daemon, ["--config", config])
            daemons.append(follower)
            try await self.awaitStatus(socket, "the follower following") { $0["state"] as? String == "open" }
            readers = try startReaders(bin: self.bin, socket: socket, subscribers: 1)
            for r in readers { _ = try await r.waitLine(seconds: 60) { $0 == "ready" } }
            self.generator.send("flood \(messages) \(scenario.size) \(scenario.rate)")
            result = try await readers[0].waitLine(seconds: 600) { $0.hasPrefix("{") }
            _ = try await self.generator.waitLine(seconds: 600) { $0.hasPrefix("flood done") }
        }
        let cpu = daemons.reduce(0) { $0 + Self.cpuSeconds($1.pid) }
        for daemon in daemons { await daemon.stopAndWait() }
        for reader in readers { await reader.stopAndWait(kill: true) }
        if !daemons.isEmpty { _ = try await self.generator.waitLine(seconds: 60) { $0.hasPrefix("disconnected 0") } }
        let json = try JSONSerialization.jsonObject(with: Data(result.utf8)) as! [String: Any]
        let received = json["messages"] as! Int
        let seconds = max(Double((json["last_ns"] as! Int) - (json["first_ns"] as! Int)) / 1e9, 1e-6)
        // The flood's end marker is one message more; the baseline sends none.
        let expected = Double(messages + (scenario.bridge == .fleet || scenario.bridge == .fleetBatched ? 1 : 0))
        return Suite.Sample(
            deliveriesPerSecond: Double(received) / seconds, bytesPerSecond: Double(received) * Double(scenario.size) / seconds,
            lostPercent: max(0, expected - Double(received)) / expected * 100, p50: Double(json["p50_us"] as! Int),
            p99: Double(json["p99_us"] as! Int), cpuPerMessage: cpu / Double(messages) * 1e6)
    }
}

extension Suite {
    static var fleetScenarios: [Scenario] {
        [.fleet, .fleetBatched, .natsBaseline, .natsBaselineIDs, .natsBaselineExpect].flatMap { bridge in
            [Scenario(group: "fleet", bridge: bridge, subscribers: 1), Scenario(group: "fleet", bridge: bridge, subscribers: 1, rate: 10_000, seconds: 3)]
        }
    }
}

extension Report {
    func printFleet() {
        let d = { (b: Suite.Bridge, rate: Bool, key: (Suite.Sample) -> Double) -> Double? in
            guard let i = self.scenarios.firstIndex(where: { $0.group == "fleet" && $0.bridge == b && ($0.rate > 0) == rate }) else { return nil }
            return Format.median(self.samples[i].map(key))
        }
        guard let base = d(.natsBaseline, false, \.deliveriesPerSecond) else { return }
        for (path, what) in [(Suite.Bridge.fleet, "one message of the stream each"), (.fleetBatched, "fleet.batch = 100")] {
            guard let ours = d(path, false, \.deliveriesPerSecond) else { continue }
            Swift.print(
                "- fleet (\(what)), flat out: upstream → bridge → JetStream → follower → reader / NATS C client → JetStream → ordered consumer = "
                    + String(format: "%.2f×", ours / base) + " (\(Format.human(ours)) against \(Format.human(base)) messages/s)")
            for (baseline, against) in [
                (Suite.Bridge.natsBaselineIDs, "with a bridge's ids (Nats-Msg-Id, Nats-Expected-Last-Msg-Id), as a bridge publishes"),
                (.natsBaselineExpect, "expecting the stream's last seq (Nats-Expected-Last-Sequence; tried for bridges, not kept)"),
            ] {
                guard let other = d(baseline, false, \.deliveriesPerSecond) else { continue }
                Swift.print(
                    "- fleet (\(what)), flat out, against the client publishing \(against) = " + String(format: "%.2f×", ours / other)
                        + " (\(Format.human(ours)) against \(Format.human(other)) messages/s)")
            }
        }
        for path in [Suite.Bridge.fleetBatched] {
            guard let p50 = d(path, true, \.p50), let p99 = d(path, true, \.p99) else { continue }
            Swift.print("- fleet (fleet.batch = 100), 10k msg/s: end to end p50 \(Format.ms(p50)), p99 \(Format.ms(p99))")
        }
        if let p50 = d(.fleet, true, \.p50), let p99 = d(.fleet, true, \.p99), let b50 = d(.natsBaseline, true, \.p50), let b99 = d(.natsBaseline, true, \.p99)
        {
            Swift.print(
                "- fleet, 10k msg/s: end to end p50 \(Format.ms(p50)), p99 \(Format.ms(p99)) (the baseline's publish → consumer: p50 \(Format.ms(b50)), p99 \(Format.ms(b99)))"
            )
        }
    }
}
