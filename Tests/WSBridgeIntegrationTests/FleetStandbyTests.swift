import Foundation
import Testing
import WSBridgeProtocol

/// `fleet.standby` (docs/fleet.md) as the fleet runs: a 3-node JetStream cluster on loopback, two
/// bridges of one stream (one leading by a lease in a key-value bucket) and two followers, each
/// its own daemon and socket, the test upstream at 1,000 messages a second; the leader killed
/// (-9) while the feed flows.
@Suite(.serialized) struct FleetStandbyTests {
    /// A bridge named `name` with `standby` (`cold+batch`: cold, with `fleet.batch = 100`), its
    /// socket in `dir`.
    static func bridge(_ dir: TemporaryDirectory, _ name: String, upstream: UpstreamServer, nats: [Int], standby: String) async throws
        -> (ManagedProcess, String)
    {
        let socket = dir.file("\(name).sock")
        let mode = standby.split(separator: "+")
        let batch = mode.dropFirst().first == "batch" ? "batch = 100\n" : ""
        let config = try writeDaemonConfig(
            dir, name, url: upstream.url, socket: socket, upstream: "dedupe = [\"tick\"]",
            extra: FleetFollowerTests.fleet(nats, role: "bridge") + "standby = \"\(mode[0])\"\nlease_ttl = \"2s\"\nreplicas = 3\n" + batch)
        let daemon = try ManagedProcess.daemon(["--config", config], name: name)
        guard await daemon.awaitReady() else { throw TestFailure("\(name) did not start: \(daemon.stderr.text.suffix(2000))") }
        try await awaitStatus(socket, "\(name)'s fleet connected") { $0.fleet?.state == "connected" && $0.fleet?.lease != nil }
        return (daemon, socket)
    }

    static func lease(_ socket: String) -> String { (try? daemonStatus(socket).fleet?.lease) ?? "?" }

    struct Fleet {
        /// Kept to the end: its directories hold the nodes' stores.
        let cluster: FleetTests.Cluster
        let nodes: [NATSServer]
        let upstream: UpstreamServer
        let a: (ManagedProcess, String)
        let b: (ManagedProcess, String)
        let followers: [ManagedProcess]
        let apps: [SocketClient]
        let dir: TemporaryDirectory

        func stop() {
            for follower in self.followers { follower.stop() }
            self.a.0.stop()
            self.b.0.stop()
            for node in self.nodes { node.process.stop() }
        }
    }

    /// The cluster with the stream on all three nodes, the test upstream, bridge a (leading)
    /// and b, two followers and an app of each.
    /// `local`: more of the followers' [local] (a queue for a backlog's burst).
    static func fleet(standby: String, local: String = "") async throws -> Fleet {
        let cluster = try FleetTests.Cluster()
        let nodes = try await cluster.startWithStream()
        do {
            let dir = try TemporaryDirectory()
            let upstream = try await UpstreamServer(.nio)
            let a = try await Self.bridge(dir, "a", upstream: upstream, nats: cluster.clients, standby: standby)
            try await awaitStatus(a.1, "a leads", timeout: .seconds(60)) { $0.fleet?.lease == "leading" }
            let b = try await Self.bridge(dir, "b", upstream: upstream, nats: cluster.clients, standby: standby)
            try await awaitStatus(b.1, "b stands by for a") { $0.fleet?.lease?.hasPrefix("standing by for ") == true }
            var followers: [ManagedProcess] = []
            var apps: [SocketClient] = []
            for name in ["f1", "f2"] {
                let (follower, socket) = try await FleetFollowerTests.follower(dir, ports: cluster.clients, name: name, local: local)
                followers.append(follower)
                apps.append(try await SocketClient.connected(to: socket, name: "\(name)-app", daemon: follower))
            }
            return Fleet(cluster: cluster, nodes: nodes, upstream: upstream, a: a, b: b, followers: followers, apps: apps, dir: dir)
        } catch {
            for node in nodes { node.process.stop() }
            throw error
        }
    }

    /// Cold: only the leader holds the upstream; killed, the standby takes over once the lease
    /// runs out, tells the followers' apps of the gap (a `leader_changed` gap line), and the feed
    /// goes on. The time from the kill to each app's first message after it is printed.
    @Test(arguments: ["cold", "cold+batch"])
    func aColdStandbyTakesOverAndTheGapIsAnnounced(standby: String) async throws {
        let f = try await Self.fleet(standby: standby)
        defer { f.stop() }
        #expect(try daemonStatus(f.b.1).state == .idle, "a cold standby holds no upstream connection")
        f.upstream.command("ticker 1000 64")
        for app in f.apps {
            #expect(await JournalTests.waitForSeq(app, 1000), "a: \(f.a.0.stderr.text.suffix(1500)) \(app.lines.name): \(app.lines.text.suffix(500))")
        }
        let marks = f.apps.map(\.lines.count)
        f.a.0.signal(SIGKILL)
        let killed = ContinuousClock.now
        _ = await f.a.0.waitForExit()
        var gaps: [JSONValue] = []
        for (app, mark) in zip(f.apps, marks) {
            let gapLine = await app.lines.wait(from: mark, timeout: .seconds(30)) { $0.contains(#""type":"gap""#) }
            let gap = try JSONValue.parse(try #require(gapLine, "no gap line; b: \(Self.lease(f.b.1))"))
            #expect(gap["reason"]?.stringValue == GapLine.leaderChanged, "\(gapLine ?? "")")
            let after = app.lines.lines.firstIndex { $0 == gapLine }.map { $0 + 1 } ?? mark
            #expect(await app.lines.wait(from: after, timeout: .seconds(30)) { $0.contains(#""type":"message""#) } != nil)
            print(
                "cold standby: \(app.lines.name) had its first message after the gap \(ContinuousClock.now - killed) after the leader's kill -9 (lease_ttl 2s)")
            gaps.append(gap)
        }
        for (app, gap) in zip(f.apps, gaps) {
            #expect(await JournalTests.waitForSeq(app, (gap["next"]?.intValue ?? 0) + 1000))
            // Each message once, in order: the seqs and the ticks only rise; one gap.
            let ticks = FleetFollowerTests.ticks(app)
            let rising = zip(ticks, ticks.dropFirst()).allSatisfy { $0.seq < $1.seq && $0.tick < $1.tick }
            #expect(rising, "\(ticks.count) messages; seqs and ticks do not only rise")
            #expect(app.lines.lines.filter { $0.contains(#""type":"gap""#) }.count == 1)
            let next = gap["next"]?.intValue ?? 0
            // The gap names its range: every message up to `after` and from `next` on is there.
            let last = try #require(gap["after"]?.intValue, "the gap line names the last message before it: \(gap)")
            #expect(last < next)
            let beforeGap = ticks.filter { $0.seq <= last }.map(\.tick)
            let afterGap = ticks.filter { $0.seq >= next }.map(\.tick)
            #expect(beforeGap == Array(1...max(1, beforeGap.count)), "before the gap: \(FleetTests.summary(beforeGap, beforeGap.count))")
            #expect(ticks.last(where: { $0.seq <= last })?.seq == last, "the message at `after` is the last before the gap")
            #expect(zip(afterGap, afterGap.dropFirst()).allSatisfy { $1 == $0 + 1 }, "after the gap, nothing missing")
            #expect(ticks.first(where: { $0.seq > last })?.seq == next, "the first after the gap is at `next`")
            if let before = ticks.last(where: { $0.seq < next }), let after = ticks.first(where: { $0.seq >= next }) {
                print(
                    "cold standby: \(app.lines.name)'s gap: ticks \(before.tick + 1) to \(after.tick - 1) reached no bridge (\(after.tick - before.tick - 1) messages)"
                )
            }
        }
        #expect(gaps[0]["next"] == gaps[1]["next"], "both followers place the gap at one stream seq")
        #expect(Self.lease(f.b.1) == "leading")
        #expect(try daemonStatus(f.b.1).state == .open)
        // Both followers numbered alike: the same ticks under the same seqs.
        let one = Dictionary(FleetFollowerTests.ticks(f.apps[0]).map { ($0.seq, $0.tick) }) { a, _ in a }
        #expect(FleetFollowerTests.ticks(f.apps[1]).allSatisfy { one[$0.seq] == nil || one[$0.seq] == $0.tick })
    }

    /// Hot: both bridges hold the upstream and publish, JetStream keeps each message once (its
    /// id from upstream.dedupe's path); the leader killed, each follower's app has every message
    /// once, in order.
    @Test func aHotStandbyLosesNothingAndDoublesNothing() async throws {
        let f = try await Self.fleet(standby: "hot")
        defer { f.stop() }
        #expect(try daemonStatus(f.b.1).state == .open, "a hot standby holds its own connection")
        f.upstream.command("ticker 1000 64 8000")
        #expect(await JournalTests.waitForSeq(f.apps[0], 2000))
        f.a.0.signal(SIGKILL)
        _ = await f.a.0.waitForExit()
        for app in f.apps {
            #expect(await app.lines.wait(timeout: .seconds(60)) { $0.contains(#"{\"tick\":8000,"#) } != nil, "b: \(Self.lease(f.b.1))")
            let ticks = FleetFollowerTests.ticks(app)
            let once = ticks.map(\.tick) == Array(1...8000)
            #expect(once, "\(app.lines.name): \(FleetTests.summary(ticks.map(\.tick), 8000))")
            let numbered = ticks.map(\.seq) == Array(1...8000)
            #expect(numbered, "the stream holds each once: \(FleetTests.summary(ticks.map(\.seq), 8000))")
        }
        try await awaitStatus(f.b.1, "b leads") { $0.fleet?.lease == "leading" }
    }
}
