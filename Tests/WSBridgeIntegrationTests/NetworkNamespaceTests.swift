import Foundation
import Testing
import WSBridgeProtocol

/// Two network namespaces joined by a veth pair, made by the test and always deleted.
/// Addresses are link-local (169.254.77.0/30) and exist only inside these namespaces.
final class NamespacePair: Sendable {
    let server: String
    let client: String
    let serverAddress = "169.254.77.1"
    let clientAddress = "169.254.77.2"
    static let ip = "/usr/sbin/ip"

    static var available: Bool {
        getuid() == 0 && FileManager.default.isExecutableFile(atPath: ip)
    }

    init() throws {
        let tag = String(UInt32.random(in: 0..<UInt32.max), radix: 36)
        self.server = "wsbs\(tag)"
        self.client = "wsbc\(tag)"
        do {
            try run(Self.ip, ["netns", "add", self.server])
            try run(Self.ip, ["netns", "add", self.client])
            try run(Self.ip, ["link", "add", "veth-s", "netns", self.server, "type", "veth", "peer", "name", "veth-c", "netns", self.client])
            try run(Self.ip, ["-n", self.server, "addr", "add", "\(self.serverAddress)/30", "dev", "veth-s"])
            try run(Self.ip, ["-n", self.client, "addr", "add", "\(self.clientAddress)/30", "dev", "veth-c"])
            for (ns, dev) in [(self.server, "veth-s"), (self.client, "veth-c")] {
                try run(Self.ip, ["-n", ns, "link", "set", "lo", "up"])
                try run(Self.ip, ["-n", ns, "link", "set", dev, "up"])
            }
        } catch {
            self.remove()
            throw error
        }
    }

    func wrapper(_ ns: String) -> [String] { [Self.ip, "netns", "exec", ns] }

    func clientLink(up: Bool) throws {
        try run(Self.ip, ["-n", self.client, "link", "set", "veth-c", up ? "up" : "down"])
    }

    /// A silent black hole: the client's packets to the server are dropped (half-open link).
    func blackhole(_ on: Bool) throws {
        let nft = ["netns", "exec", self.client, "/usr/sbin/nft"]
        if on {
            try run(Self.ip, nft + ["add", "table", "inet", "wsbtest"])
            try run(Self.ip, nft + ["add", "chain", "inet", "wsbtest", "out", "{ type filter hook output priority 0; }"])
            try run(Self.ip, nft + ["add", "rule", "inet", "wsbtest", "out", "ip", "daddr", self.serverAddress, "drop"])
        } else {
            try run(Self.ip, nft + ["delete", "table", "inet", "wsbtest"])
        }
    }

    private func remove() {
        _ = try? run(Self.ip, ["netns", "del", self.server], allowFailure: true)
        _ = try? run(Self.ip, ["netns", "del", self.client], allowFailure: true)
    }

    deinit { self.remove() }
}

/// A namespace pair with the test server in one namespace and wsbridged (connected, `open`) in
/// the other; the daemon is stopped and the namespaces deleted when the value goes.
final class NetnsDaemon: Sendable {
    let net: NamespacePair
    let dir: TemporaryDirectory
    let server: UpstreamServer
    let daemon: ManagedProcess
    /// With `fallbackInClient`: an upstream on the client namespace's loopback, the fallback URL.
    let fallback: UpstreamServer?

    init(fallbackInClient: Bool = false) async throws {
        let net = try NamespacePair()
        let dir = try TemporaryDirectory()
        let server = try await UpstreamServer(.nio, arguments: ["--host", net.serverAddress], wrapper: net.wrapper(net.server))
        let fallback = fallbackInClient ? try await UpstreamServer(.nio, arguments: ["--host", "127.0.0.1"], wrapper: net.wrapper(net.client)) : nil
        let fallbackURLs = fallback.map { "fallback_urls = [\"ws://127.0.0.1:\($0.port)/\"]" } ?? ""
        let config = try dir.write(
            "wsbridged.toml",
            """
            [upstream]
            url = "ws://\(net.serverAddress):\(server.port)/"
            \(fallbackURLs)
            connect_timeout = "2s"
            [heartbeat]
            interval = "1s"
            deadline = "1s"
            [backoff]
            base = "200ms"
            cap = "1s"
            [reachability]
            poll_interval = "30s"
            """
        )
        let daemon = try ManagedProcess.daemon(
            command: net.wrapper(net.client) + daemonCommand(["--config", config, "--log-level", "debug", "--socket", dir.file("d.sock")]), name: "wsbridged")
        guard await daemon.awaitLink(.open) else {
            daemon.stop()
            throw TestFailure("daemon did not open: \(daemon.stderr.text)")
        }
        (self.net, self.dir, self.server, self.daemon, self.fallback) = (net, dir, server, daemon, fallback)
    }

    deinit {
        self.daemon.stop()
    }
}

/// Real network faults: an interface going down and up, and a half-open link.
@Suite(.serialized, .enabled(if: NamespacePair.available, "needs root and iproute2 (network namespaces)"))
struct NetworkNamespaceTests {
    @Test func linkDownWaitsWithoutAttemptsAndLinkUpReconnectsAtOnce() async throws {
        let f = try await NetnsDaemon()
        defer { withExtendedLifetime(f) {} }  // the daemon and namespaces live to the test's end
        let (net, daemon) = (f.net, f.daemon)

        let down = daemon.eventMark
        try net.clientLink(up: false)
        #expect(await daemon.awaitLink(.waitingForNetwork, from: down), "\(daemon.stderr.text)")
        #expect(try daemonStatus(f.dir.file("d.sock")).lastClose?.reason.hasPrefix("network lost") == true, "\(daemon.stderr.text)")
        // While the route is gone: no connection attempts (backoff cap is 1 s, so 3 s would show several).
        let idle = daemon.eventMark
        #expect(await !daemon.awaitLink(.connecting, from: idle, timeout: .seconds(3)), "\(daemon.events?.messages.text ?? "")")

        let up = daemon.eventMark
        let started = ContinuousClock.now
        try net.clientLink(up: true)
        #expect(await daemon.awaitLink(.open, from: up))
        let elapsed = ContinuousClock.now - started
        print("measure: link up -> open in \(elapsed)")
        // Straight from waitingForNetwork to connecting: no backoff delay after link-up.
        let phases = daemon.events?.messages.lines[up...].filter { $0.contains("STATUS=") } ?? []
        #expect(!phases.contains { $0.contains("STATUS=backingOff") }, "\(phases)")
    }

    /// With failover, one URL with a route is enough: when the primary's interface goes down,
    /// the link does not wait for the network (the fallback on loopback still has a route) but
    /// moves to the fallback.
    @Test func aFallbackWithARouteKeepsTheLinkTryingWhenThePrimaryLosesItsRoute() async throws {
        let f = try await NetnsDaemon(fallbackInClient: true)
        defer { withExtendedLifetime(f) {} }  // the daemon and namespaces live to the test's end
        let (net, daemon) = (f.net, f.daemon)
        let mark = daemon.eventMark
        try net.clientLink(up: false)
        #expect(await f.fallback?.event("connected") != nil, "\(daemon.stderr.text)")
        #expect(await daemon.awaitLink(.open, from: mark), "\(daemon.stderr.text)")
        #expect(!(daemon.events?.messages.lines[mark...].contains { $0.contains("STATUS=waitingForNetwork") } ?? true), "\(daemon.stderr.text)")
    }

    /// A reload that changes upstream.url moves the route check to the new host (it was fixed
    /// at start): here the new host has no route inside the client's namespace.
    @Test func aReloadMovesTheReachabilityCheckToTheNewHost() async throws {
        let f = try await NetnsDaemon()
        defer { withExtendedLifetime(f) {} }  // the daemon and namespaces live to the test's end
        let (net, dir, daemon) = (f.net, f.dir, f.daemon)
        let config = dir.file("wsbridged.toml")
        let text = try String(contentsOfFile: config, encoding: .utf8)
        try text.replacingOccurrences(of: "ws://\(net.serverAddress):", with: "ws://169.254.99.1:").write(toFile: config, atomically: true, encoding: .utf8)
        let mark = daemon.eventMark
        daemon.signal(SIGHUP)
        // The route to the new host is checked: there is none, so the link waits for the network.
        #expect(await daemon.awaitLink(.waitingForNetwork, from: mark), "\(daemon.stderr.text)")
        #expect(try daemonStatus(dir.file("d.sock")).lastClose?.reason.hasPrefix("network lost") == true, "\(daemon.stderr.text)")
    }

    @Test func aNetworkChangeWhileConnectedChecksTheLinkAtOnce() async throws {
        let f = try await NetnsDaemon()
        defer { withExtendedLifetime(f) {} }  // the daemon and namespaces live to the test's end
        let (net, daemon) = (f.net, f.daemon)
        let mark = daemon.stderr.count
        // A second address on the client's interface: the route stays, the connection may not.
        try run(NamespacePair.ip, ["-n", net.client, "addr", "add", "169.254.78.2/30", "dev", "veth-c"])
        let check = await daemon.stderr.wait(from: mark, containing: "heartbeat: liveness check")
        #expect(check?.contains("network changed") == true, "\(daemon.stderr.text)")
        #expect(!daemon.stderr.lines[mark...].contains { $0.contains("waitingForNetwork") })
    }

    @Test func halfOpenLinkIsDetectedByTheHeartbeat() async throws {
        let f = try await NetnsDaemon()
        defer { withExtendedLifetime(f) {} }  // the daemon and namespaces live to the test's end
        let (net, daemon) = (f.net, f.daemon)
        // Let a heartbeat round trip complete first.
        #expect(await daemon.awaitEvent { $0.hasPrefix("STATUS=open ") && $0.contains(", rtt ") })

        let mark = daemon.eventMark
        let started = ContinuousClock.now
        try net.blackhole(true)
        // The link leaves `open` (STATUS= says every phase; RTT changes keep it `open`).
        #expect(await daemon.awaitEvent(from: mark) { $0.hasPrefix("STATUS=") && !$0.hasPrefix("STATUS=open ") }, "\(daemon.stderr.text)")
        let detection = ContinuousClock.now - started
        let dead = try daemonStatus(f.dir.file("d.sock")).lastClose?.reason
        #expect(dead?.hasPrefix("heartbeat deadline passed") == true, "\(String(describing: dead))")
        print("measure: half-open link detected in \(detection) (interval 1 s + deadline 1 s)")
        // Detection comes from the heartbeat (the unit tests pin its timing to interval +
        // deadline with an injected clock); here: nothing arrived for at least the deadline.
        let silence = dead.flatMap { $0.split(separator: "nothing received for ").last }.flatMap { Double($0.dropLast()) }
        #expect((silence ?? 0) >= 1.0, "\(dead ?? "")")

        let down = daemon.eventMark
        try net.blackhole(false)
        #expect(await daemon.awaitLink(.open, from: down), "\(daemon.stderr.text)")
    }
}
