import ArgumentParser
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import WSBridgeCore
import WSBridgeDaemon

/// Fan-out benchmark: the same generator (wsbridge-testserver bursts) measured side by side
/// through a plain WebSocket client (the baseline: our NIO link, no local plane) and through
/// wsbridged to 1 and to N Unix-socket subscribers. Prints a table; run with release binaries.
@main
struct Bench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "wsbridge-bench",
        abstract: "wsbridged's benchmarks, each side by side with its baselines in one run.",
        subcommands: [Fanout.self, Pressure.self, DropCost.self, DeflateCost.self],
        defaultSubcommand: Fanout.self
    )
}

/// wsbridged to 1 and N in-process subscribers against a plain WebSocket client.
struct Fanout: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Measure wsbridged's fan-out against a plain WebSocket client on the same generator."
    )

    @Option(help: "Folder with wsbridged and wsbridge-testserver (a release build).")
    var bin: String

    @Option(help: "Subscribers for the fan-out run.")
    var subscribers = 100

    @Option(help: "Messages per burst.")
    var messages = 20000

    @Option(help: "Message size in bytes.")
    var size = 100

    func run() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("wsbridge-bench-\(getpid())").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }

        let server = try Child("\(self.bin)/wsbridge-testserver", ["--port", "0", "--no-echo", "--max-frame", "1048576"])
        defer { server.stop() }
        let port = try await server.waitLine { $0.hasPrefix("listening ") }.dropFirst(10)

        // Baseline: a plain WebSocket client (our NIO link, no local plane) on the same generator.
        let baseline = try await self.baseline(url: "ws://127.0.0.1:\(port)/", server: server)

        let socket = "\(dir)/b.sock"
        let config = "\(dir)/b.toml"
        try """
        [upstream]
        url = "ws://127.0.0.1:\(port)/"
        compression = false
        [reachability]
        enabled = false
        [local]
        socket = "\(socket)"
        subscriber_queue = \(self.messages * 2)
        subscriber_queue_bytes = \(self.messages * (self.size + 100) * 2)
        [log]
        level = "warning"
        """.write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = try Child("\(self.bin)/wsbridged", ["--config", config])
        defer { daemon.stop() }
        _ = try await server.waitLine { $0.hasPrefix("connected 1") }
        let idleRSS = try Self.rss(daemon.pid)

        let group = MultiThreadedEventLoopGroup.singleton
        let one = try await Subscribers.connect(count: 1, path: socket, group: group)
        let single = try await self.burst(server: server, subscribers: one)
        await one.close()

        let many = try await Subscribers.connect(count: self.subscribers, path: socket, group: group)
        try await Task.sleep(for: .milliseconds(200))
        let rssWith = try Self.rss(daemon.pid)
        let fanout = try await self.burst(server: server, subscribers: many)
        await many.close()

        let perSubscriberKiB = Double(rssWith - idleRSS) / Double(self.subscribers)
        print("wsbridge-bench: \(self.messages) messages of \(self.size) bytes per burst, loopback, release build")
        print("| run | messages/s | deliveries/s | vs baseline |")
        print("| --- | ---: | ---: | ---: |")
        print("| baseline: plain WebSocket client | \(Int(baseline)) | \(Int(baseline)) | 100 % |")
        print("| wsbridged → 1 subscriber | \(Int(single)) | \(Int(single)) | \(Int(single / baseline * 100)) % |")
        print(
            "| wsbridged → \(self.subscribers) subscribers | \(Int(fanout)) | \(Int(fanout * Double(self.subscribers))) | \(Int(fanout / baseline * 100)) % |")
        print("idle RSS \(idleRSS) KiB; with \(self.subscribers) idle subscribers \(rssWith) KiB (\(String(format: "%.1f", perSubscriberKiB)) KiB each)")
    }

    /// Messages per second a plain client receives from one burst.
    func baseline(url: String, server: Child) async throws -> Double {
        let counter = NIOLockedValueBox(0)
        let done = AsyncStream<Void>.makeStream()
        let target = self.messages
        var configuration = Configuration()
        configuration.upstream.url = try UpstreamURL(parsing: url)
        configuration.upstream.compression = false
        configuration.reachability.enabled = false
        var logger = Logger(label: "bench")
        logger.logLevel = .critical
        let link = try await UpstreamLinkHandle.make(
            configuration: configuration,
            networkAvailable: true,
            environment: [:],
            eventLoop: MultiThreadedEventLoopGroup.singleton.next(),
            logger: logger
        ) { event in
            if case .message = event {
                let n = counter.withLockedValue { c -> Int in
                    c += 1
                    return c
                }
                if n == target { done.continuation.yield() }
            }
        }.get()
        link.connect()
        _ = try await server.waitLine { $0.hasPrefix("connected 1") }
        let start = ContinuousClock.now
        server.send("burst \(self.messages) \(self.size)")
        for await _ in done.stream { break }
        let elapsed = ContinuousClock.now - start
        _ = try? await link.shutdown().get()
        _ = try await server.waitLine { $0.hasPrefix("disconnected 0") }
        return Double(self.messages) / elapsed.seconds
    }

    /// Messages per second each subscriber receives from one burst (until the last has all).
    func burst(server: Child, subscribers: Subscribers) async throws -> Double {
        let start = ContinuousClock.now
        server.send("burst \(self.messages) \(self.size)")
        await subscribers.waitForAll(self.messages)
        let elapsed = ContinuousClock.now - start
        return Double(self.messages) / elapsed.seconds
    }

    static func rss(_ pid: Int32) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
        return Int(line.split(separator: " ").dropFirst().first { Int($0) != nil } ?? "0") ?? 0
    }
}
