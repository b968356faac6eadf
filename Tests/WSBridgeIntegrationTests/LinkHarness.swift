import Foundation
import Logging
import NIOCore
import NIOPosix
import WSBridgeCore
import WSBridgeDaemon
import WSBridgeProtocol

/// An in-process `UpstreamLink` driven against a real server, its events recorded as lines:
/// `state PHASE: REASON`, `attempt N`, `retry N DELAY`, `rtt DURATION`, `message text|binary PAYLOAD`.
final class LinkHarness: Sendable {
    let events = LineCollector(name: "link")
    let handle: UpstreamLinkHandle

    init(_ configuration: Configuration, environment: [String: String] = [:], networkAvailable: Bool = true) async throws {
        let events = self.events
        var logger = Logger(label: "wsbridge.test")
        logger.logLevel = .critical
        self.handle = try await UpstreamLinkHandle.make(
            configuration: configuration,
            networkAvailable: networkAvailable,
            environment: environment,
            eventLoop: MultiThreadedEventLoopGroup.singleton.next(),
            logger: logger,
            onEvent: { event in
                let line: String
                switch event {
                case .state(let phase, let reason, _): line = "state \(phase.rawValue): \(reason)"
                case .attempt(let n, let url): line = "attempt \(n) \(url)"
                case .retryScheduled(let n, let delay): line = "retry \(n) \(delay.short)"
                case .roundTrip(let rtt): line = "rtt \(rtt.short)"
                case .message(let m):
                    let payload = m.kind == .text ? String(buffer: m.data) : "\(m.data.readableBytes) bytes"
                    line = "message \(m.kind == .text ? "text" : "binary") \(payload)"
                }
                events.append(Data((line + "\n").utf8))
            }
        ).get()
    }

    var mark: Int { self.events.count }

    func state(_ phase: ConnectionPhase, from: Int = 0, timeout: Duration = .seconds(20)) async -> String? {
        await self.events.wait(from: from, timeout: timeout) { $0.hasPrefix("state \(phase.rawValue):") }
    }

    func send(_ text: String) async throws -> Bool {
        try await self.handle.send(OutboundMessage(kind: .text, data: ByteBuffer(string: text))).get()
    }

    func shutdown() async {
        _ = try? await self.handle.shutdown().get()
    }

    /// A configuration with fast, test-sized timings.
    static func configuration(url: String) throws -> Configuration {
        var c = Configuration()
        c.upstream.url = try UpstreamURL(parsing: url)
        c.upstream.connectTimeout = .seconds(5)
        c.backoff.policy = BackoffPolicy(base: .milliseconds(50), cap: .milliseconds(200), stableAfter: .seconds(30))
        c.heartbeat.interval = .seconds(20)
        c.heartbeat.deadline = .seconds(10)
        c.proxy.useEnvironment = false
        c.reachability.enabled = false
        return c
    }
}
