import Foundation
import Testing
import WSBridgeProtocol

/// `fleet.standby` (docs/fleet.md): two bridges of one stream, one leading by a lease in a
/// JetStream key-value bucket, and a follower; the leader killed (-9) while the feed flows.
@Suite(.serialized) struct FleetStandbyTests {
    /// A bridge named `name` with `standby`, its socket in `dir`.
    static func bridge(_ dir: TemporaryDirectory, _ name: String, upstream: UpstreamServer, nats: NATSServer, standby: String) async throws
        -> (ManagedProcess, String)
    {
        let socket = dir.file("\(name).sock")
        let config = try writeDaemonConfig(
            dir, name, url: upstream.url, socket: socket, upstream: "dedupe = [\"tick\"]",
            extra: FleetFollowerTests.fleet([nats.client], role: "bridge") + "standby = \"\(standby)\"\nlease_ttl = \"2s\"\n")
        let daemon = try ManagedProcess.daemon(["--config", config], name: name)
        guard await daemon.awaitReady() else { throw TestFailure("\(name) did not start: \(daemon.stderr.text.suffix(2000))") }
        try await awaitStatus(socket, "\(name)'s fleet connected") { $0.fleet?.state == "connected" && $0.fleet?.lease != nil }
        return (daemon, socket)
    }

    static func lease(_ socket: String) -> String { (try? daemonStatus(socket).fleet?.lease) ?? "?" }

    /// NATS with the stream, the test upstream, bridge a (leading) and b, a follower and its app.
    static func fleet(standby: String) async throws -> (
        nats: NATSServer, upstream: UpstreamServer, a: (ManagedProcess, String), b: (ManagedProcess, String), follower: ManagedProcess,
        app: SocketClient, dir: TemporaryDirectory
    ) {
        let dir = try TemporaryDirectory()
        let nats = try await FleetTests.jetStream(dir)
        guard try FleetTests.js(nats, ["create-stream", "FEED", "feed.>"]).first?["name"] == "FEED" else {
            nats.process.stop()
            throw TestFailure("the stream was not made")
        }
        let upstream = try await UpstreamServer(.nio)
        let a = try await Self.bridge(dir, "a", upstream: upstream, nats: nats, standby: standby)
        try await awaitStatus(a.1, "a leads") { $0.fleet?.lease == "leading" }
        let b = try await Self.bridge(dir, "b", upstream: upstream, nats: nats, standby: standby)
        try await awaitStatus(b.1, "b stands by for a") { $0.fleet?.lease?.hasPrefix("standing by for ") == true }
        let (follower, socket) = try await FleetFollowerTests.follower(dir, nats: nats)
        let app = try await SocketClient.connected(to: socket, name: "app", daemon: follower)
        return (nats, upstream, a, b, follower, app, dir)
    }

    /// Cold: only the leader holds the upstream; killed, the standby takes over once the lease
    /// runs out, tells the followers' apps of the gap (a `leader_changed` gap line), and the feed
    /// goes on. The time from the kill to the app's first message after it is printed.
    @Test func aColdStandbyTakesOverAndTheGapIsAnnounced() async throws {
        let f = try await Self.fleet(standby: "cold")
        defer {
            f.follower.stop()
            f.a.0.stop()
            f.b.0.stop()
            f.nats.process.stop()
        }
        #expect(try daemonStatus(f.b.1).state == .idle, "a cold standby holds no upstream connection")
        f.upstream.command("ticker 500 64")
        #expect(await JournalTests.waitForSeq(f.app, 300))
        f.a.0.signal(SIGKILL)
        let killed = ContinuousClock.now
        _ = await f.a.0.waitForExit()
        let mark = f.app.lines.count
        let gapLine = await f.app.lines.wait(from: mark, timeout: .seconds(30)) { $0.contains(#""type":"gap""#) }
        let gap = try JSONValue.parse(try #require(gapLine, "no gap line; b: \(Self.lease(f.b.1))"))
        #expect(gap["reason"]?.stringValue == GapLine.leaderChanged, "\(gapLine ?? "")")
        let after = f.app.lines.count
        #expect(await f.app.lines.wait(from: after, timeout: .seconds(30)) { $0.contains(#""type":"message""#) } != nil)
        let firstAfter = ContinuousClock.now - killed
        print("cold standby: the follower's first message \(firstAfter) after the leader's kill -9 (fleet.lease_ttl = 2s)")
        #expect(await JournalTests.waitForSeq(f.app, (gap["next"]?.intValue ?? 0) + 300))
        #expect(Self.lease(f.b.1) == "leading")
        #expect(try daemonStatus(f.b.1).state == .open)
        // Each message once, in order: the seqs and the ticks only rise.
        let ticks = FleetFollowerTests.ticks(f.app)
        let rising = zip(ticks, ticks.dropFirst()).allSatisfy { $0.seq < $1.seq && $0.tick < $1.tick }
        #expect(rising, "\(ticks.count) messages; seqs and ticks do not only rise")
        #expect(f.app.lines.lines.filter { $0.contains(#""type":"gap""#) }.count == 1)
    }

    /// Hot: both bridges hold the upstream and publish, JetStream keeps each message once (its
    /// id from upstream.dedupe's path); the leader killed, the follower's app has every message
    /// once, in order.
    @Test func aHotStandbyLosesNothingAndDoublesNothing() async throws {
        let f = try await Self.fleet(standby: "hot")
        defer {
            f.follower.stop()
            f.a.0.stop()
            f.b.0.stop()
            f.nats.process.stop()
        }
        #expect(try daemonStatus(f.b.1).state == .open, "a hot standby holds its own connection")
        f.upstream.command("ticker 500 64 6000")
        #expect(await JournalTests.waitForSeq(f.app, 1000))
        f.a.0.signal(SIGKILL)
        _ = await f.a.0.waitForExit()
        #expect(await f.app.lines.wait(timeout: .seconds(60)) { $0.contains(#"{\"tick\":6000,"#) } != nil, "b: \(Self.lease(f.b.1))")
        let ticks = FleetFollowerTests.ticks(f.app)
        let once = ticks.map(\.tick) == Array(1...6000)
        #expect(once, "\(FleetTests.summary(ticks.map(\.tick), 6000))")
        let numbered = ticks.map(\.seq) == Array(1...6000)
        #expect(numbered, "the stream holds each once: \(FleetTests.summary(ticks.map(\.seq), 6000))")
        try await awaitStatus(f.b.1, "b leads") { $0.fleet?.lease == "leading" }
    }
}
