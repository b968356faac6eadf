import ArgumentParser
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// How long a small message takes from a local app to the upstream, and a `request`'s round
/// trip, beside a baseline build: what TCP_NODELAY on the upstream socket changes. Nagle's
/// algorithm holds a small write while an earlier one is unacknowledged, and a server that does
/// not answer at once acknowledges late (delayed ACK), so the second of two sends in a row is
/// where it shows.
struct Latency: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Microseconds from `send` to the upstream (one, and the second of two in a row) and `request` round trips; beside a baseline build."
    )

    @OptionGroup var builds: Builds

    @Option(help: "Runs per build, interleaved with the baseline's.")
    var runs = 5

    @Option(help: "Sends, pairs and requests per run.")
    var count = 200

    struct Sample {
        var send: [Double] = []
        var second: [Double] = []
        var secondWhileFeeding: [Double] = []
        var request: [Double] = []
    }

    func run() async throws {
        let daemons = self.builds.daemons
        var samples: [String: [Sample]] = [:]
        for run in 1...self.runs {
            for (name, path) in daemons {
                emitLine("run \(run)/\(self.runs): \(name)")
                samples[name, default: []].append(try await self.measure(daemon: path))
            }
        }
        emitLine("")
        emitLine("microseconds, median over \(self.runs) runs of \(self.count) each (min-max of the runs' medians)")
        emitLine("| measure | build | p50 | p99 |")
        emitLine("| --- | --- | ---: | ---: |")
        let measures: [(String, KeyPath<Sample, [Double]>)] = [
            ("send -> upstream", \.send), ("second of two sends -> upstream", \.second),
            ("second of two sends -> upstream, the upstream sending 5 msg/s", \.secondWhileFeeding), ("request round trip", \.request),
        ]
        for (label, path) in measures {
            for (name, _) in daemons {
                let runs = samples[name] ?? []
                let p50s = runs.map { Self.percentile($0[keyPath: path], 0.5) }
                let p99s = runs.map { Self.percentile($0[keyPath: path], 0.99) }
                emitLine(
                    "| \(label) | \(name) | \(Self.format(Self.percentile(p50s, 0.5))) (\(Self.format(p50s.min() ?? 0))-\(Self.format(p50s.max() ?? 0))) | \(Self.format(Self.percentile(p99s, 0.5))) |"
                )
            }
        }
    }

    static func percentile(_ values: [Double], _ p: Double) -> Double {
        guard !values.isEmpty else { return 0 }
        let sorted = values.sorted()
        return sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * p + 0.5))]
    }

    static func format(_ v: Double) -> String { v >= 100 ? String(Int(v.rounded())) : String(format: "%.1f", v) }

    static func monotonicNanos() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }

    /// An upstream (stamping what it receives) and `daemon` on it; `body` measures with a client.
    func withDaemon<T: Sendable>(
        _ daemon: String, echo: Bool, serverArguments: [String] = [], _ body: (Child, BlockingClient) async throws -> T
    ) async throws -> T {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("wsbridge-latency-\(getpid())-\(UUID().uuidString.prefix(6))").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let server = try Child("\(self.builds.bin)/wsbridge-testserver", ["--port", "0", "--stamp"] + (echo ? [] : ["--no-echo"]) + serverArguments)
        defer { server.stop() }
        let port = Int(try await server.waitLine { $0.hasPrefix("listening ") }.dropFirst(10))!
        let socket = "\(dir)/d.sock"
        let config = "\(dir)/wsbridged.toml"
        try """
        [upstream]
        url = "ws://127.0.0.1:\(port)/"
        [reachability]
        enabled = false
        [local]
        socket = "\(socket)"
        [log]
        level = "warning"
        """.write(toFile: config, atomically: true, encoding: .utf8)
        let wsbridged = try Child(daemon, ["--config", config])
        defer { wsbridged.stop() }
        _ = try await server.waitLine { $0.hasPrefix("connected ") }
        let client = try BlockingClient(path: socket)
        // Replies only: this client is no subscriber.
        client.write(#"{"id":"u","op":"unsubscribe"}"# + "\n")
        try client.readReplies(1)
        return try await body(server, client)
    }

    func measure(daemon: String) async throws -> Sample {
        var sample = Sample()
        let count = self.count
        // No echo: the upstream answers nothing, so only its (delayed) ACKs acknowledge a send.
        try await self.withDaemon(daemon, echo: false) { server, client in
            for i in 0..<count {
                let start = Self.monotonicNanos()
                client.write(#"{"id":\#(i),"op":"send","text":"s\#(i)"}"# + "\n")
                try client.readReplies(1)
                sample.send.append(try await Self.arrival(server, "s\(i)", since: start))
            }
            sample.second = try await Self.pairs(server, client, count: count)
        }
        // A feed: the upstream sends all the time (so it delays its ACKs, as an interactive
        // peer does) and answers nothing.
        try await self.withDaemon(daemon, echo: false, serverArguments: ["--ticker", "5"]) { server, client in
            sample.secondWhileFeeding = try await Self.pairs(server, client, count: count)
        }
        try await self.withDaemon(daemon, echo: true) { _, client in
            for i in 0..<count {
                let start = Self.monotonicNanos()
                client.write(#"{"id":\#(i),"op":"request","text":"{\"rid\":\#(i)}","match":{"field":"rid","equals":\#(i)},"timeout":5}"# + "\n")
                try client.readReplies(1)
                sample.request.append(Double(Self.monotonicNanos() - start) / 1000)
            }
        }
        return sample
    }

    /// Two sends in a row, `count` times: microseconds from the second's write to its receipt.
    static func pairs(_ server: Child, _ client: BlockingClient, count: Int) async throws -> [Double] {
        var latencies: [Double] = []
        for i in 0..<count {
            client.write(#"{"id":"a\#(i)","op":"send","text":"a\#(i)"}"# + "\n")
            try client.readReplies(1)
            let start = Self.monotonicNanos()
            client.write(#"{"id":"b\#(i)","op":"send","text":"b\#(i)"}"# + "\n")
            try client.readReplies(1)
            latencies.append(try await Self.arrival(server, "b\(i)", since: start))
        }
        return latencies
    }

    /// Microseconds from `start` to the upstream's receipt of `text` (its stamped event line).
    static func arrival(_ server: Child, _ text: String, since start: Int64) async throws -> Double {
        let line = try await server.waitLine { $0.hasPrefix("message@") && $0.hasSuffix(" \(text)") }
        let stamp = Int64(line.dropFirst("message@".count).prefix { $0 != " " }) ?? start
        return Double(stamp - start) / 1000
    }
}
