import Foundation
import Testing
import WSBridgeProtocol

/// `fleet.batch` (docs/fleet.md, "Batches"): a bridge packs what waits into few messages of the
/// stream, and every follower numbers each upstream message alone, alike, across its restarts and
/// whatever happens to the stream.
@Suite(.serialized) struct FleetBatchTests {
    /// NATS, the stream FEED, the test upstream, a bridge with `fleet.batch = 100` (connected).
    static func batching(_ dir: TemporaryDirectory) async throws -> (NATSServer, UpstreamServer, ManagedProcess, String) {
        let nats = try await FleetTests.jetStream(dir)
        guard try FleetTests.js(nats, ["create-stream", "FEED", "feed.>"]).first?["name"] == "FEED" else {
            nats.process.stop()
            throw TestFailure("the stream was not made")
        }
        let upstream = try await UpstreamServer(.nio)
        let (bridge, socket) = try await Self.bridge(dir, upstream: upstream, nats: nats)
        return (nats, upstream, bridge, socket)
    }

    static func bridge(_ dir: TemporaryDirectory, upstream: UpstreamServer, nats: NATSServer, batch: Int = 100) async throws -> (ManagedProcess, String) {
        let socket = dir.file("bridge.sock")
        let config = try writeDaemonConfig(
            dir, "bridge", url: upstream.url, socket: socket, extra: FleetFollowerTests.fleet([nats.client], role: "bridge") + "batch = \(batch)\n")
        let bridge = try ManagedProcess.daemon(["--config", config], name: "bridge")
        guard await bridge.awaitLink(.open) else { throw TestFailure(bridge.stderr.text) }
        try await awaitStatus(socket, "the bridge's fleet connected") { $0.fleet?.state == "connected" }
        return (bridge, socket)
    }

    /// The (seq, tick) of each message line `client` read from line `from` on, and whether the
    /// ticks are 1...total once each in order under seqs that only rise (`sameSeq`: seq n is tick n).
    static func whole(_ ticks: [(seq: Int, tick: Int)], _ total: Int, sameSeq: Bool) -> (Bool, String) {
        let rising = zip(ticks, ticks.dropFirst()).allSatisfy { $0.seq < $1.seq }
        let once = ticks.map(\.tick) == Array(1...total)
        let same = !sameSeq || ticks.allSatisfy { $0.seq == $0.tick }
        return (rising && once && same, "rising \(rising), same seq \(same): \(FleetTests.summary(ticks.map(\.tick), total))")
    }

    /// NATS killed while 4,000 messages flow: the ones that waited go in batches once it is back.
    /// A follower killed before it (-9) resumes from its journal's position in a stream of
    /// batches, and a new follower starts after the stream's last message at its number: every
    /// follower numbers tick n as seq n, each once, in order.
    @Test func aBacklogGoesInBatchesAndFollowersNumberEachMessageAlone() async throws {
        let dir = try TemporaryDirectory()
        var (nats, upstream, bridge, bridgeSocket) = try await Self.batching(dir)
        var daemons: [ManagedProcess] = [bridge]
        defer {
            for daemon in daemons { daemon.stop() }
            nats.process.stop()
        }
        let (f1, socket) = try await FleetFollowerTests.follower(dir, ports: [nats.client], name: "f1")
        let app = try await SocketClient.connected(to: socket, name: "f1-app", daemon: f1)
        upstream.command("ticker 500 64 4000")
        #expect(await JournalTests.waitForSeq(app, 500))
        f1.signal(SIGKILL)
        _ = await f1.waitForExit()
        let before = FleetFollowerTests.ticks(app)
        nats.process.signal(SIGKILL)
        _ = await nats.process.waitForExit()
        try await awaitStatus(bridgeSocket, "the fleet to see NATS gone") { $0.fleet?.state == "disconnected" }
        try await awaitStatus(bridgeSocket, "messages waiting meanwhile") { ($0.fleet?.lag ?? 0) > 300 }
        nats = try await FleetTests.jetStream(dir, client: nats.client)
        try await awaitStatus(bridgeSocket, "every message acknowledged", timeout: .seconds(60)) { s in
            s.seq >= 4000 && s.fleet?.acknowledgedThrough == s.seq
        }
        #expect(try daemonStatus(bridgeSocket).fleet?.lost == 0)
        // What waited went in batches: fewer messages in the stream than the feed's.
        let stored = try #require(try FleetTests.js(nats, ["info", "FEED"]).first?.value(at: "state.messages")?.intValue)
        #expect(stored < 4000 - 200, "the stream holds \(stored) messages for 4,000")
        // f1 again, from its journal; its app resumes from the last seq it had.
        let (again, _) = try await FleetFollowerTests.follower(dir, ports: [nats.client], name: "f1")
        daemons.append(again)
        let last = try #require(before.last, "f1's app had nothing before its kill")
        let (back, _, from) = try await JournalTests.resume(socket, since: last.seq, stream: "jetstream-FEED", name: "f1-back")
        #expect(await back.lines.wait(from: from, timeout: .seconds(60)) { $0.contains(#"{\"tick\":4000,"#) } != nil, "\(again.stderr.text.suffix(2000))")
        let (ok, why) = Self.whole(before + FleetFollowerTests.ticks(back, from: from), 4000, sameSeq: true)
        #expect(ok, "f1: \(why)")
        // A follower with no position: after the stream's last message, at its number.
        let (f2, socket2) = try await FleetFollowerTests.follower(dir, ports: [nats.client], name: "f2")
        daemons.append(f2)
        let fresh = try await SocketClient.connected(to: socket2, name: "f2-app", daemon: f2)
        let hello = try JSONValue.parse(try #require(fresh.lines.lines.first { $0.contains(#""type":"hello""#) }))
        #expect(hello["seq"]?.intValue == 4000, "\(hello)")
        upstream.command(#"send {"tick":4001}"#)
        for client in [fresh, back] {
            #expect(await JournalTests.waitForSeq(client, 4001), "\(client.lines.name)")
            #expect(FleetFollowerTests.ticks(client).last.map { $0.seq == 4001 && $0.tick == 4001 } == true, "\(FleetFollowerTests.ticks(client).suffix(2))")
        }
        // `status` says where in the stream: its last message's seq, not the number.
        let lastSeq = try #require(try FleetTests.js(nats, ["info", "FEED"]).first?.value(at: "state.last_seq")?.intValue)
        let said = try daemonStatus(socket2).fleet?.streamSeq
        #expect(lastSeq < 4001 && said == UInt64(lastSeq), "the stream's last seq \(lastSeq), status says \(String(describing: said))")
    }

    /// Another publisher's message in the stream while it flows, the stream purged and another
    /// publisher's message after it, and the bridge restarted on
    /// the purged stream (it cannot read where the numbers stood), then restarted with `batch = 1`:
    /// the follower's app has every tick once, in order, under seqs that only rise (the restarted
    /// bridge goes on from 1,000 × the stream's next seq, above any number given; the one with no
    /// batches numbers its messages after those, as the stream's are numbered).
    @Test func aStreamChangedUnderABatchingBridgeLosesNothingAtItsFollowers() async throws {
        let dir = try TemporaryDirectory()
        let (nats, upstream, first, bridgeSocket) = try await Self.batching(dir)
        var bridge = first
        defer {
            bridge.stop()
            nats.process.stop()
        }
        let (follower, socket) = try await FleetFollowerTests.follower(dir, ports: [nats.client], name: "f1")
        defer { follower.stop() }
        let app = try await SocketClient.connected(to: socket, name: "f1-app", daemon: follower)
        upstream.command("ticker 200 64 1000")
        try await awaitStatus(bridgeSocket, "500 acknowledged") { ($0.fleet?.acknowledgedThrough ?? 0) >= 500 }
        let foreign = try FleetTests.jsAnswer(nats, ["publish", "FEED", "feed.other", "not the bridge's"])
        #expect(foreign.lines.first?["seq"] != nil, "\(foreign.error)")
        // The purge once the follower took what the stream has: a purge deletes what a follower
        // has not taken yet, whoever published it (that is the operator's to lose, not the fleet's).
        #expect(await app.lines.wait(timeout: .seconds(30)) { $0.contains(#"{\"tick\":1000,"#) } != nil)
        let purged = try FleetTests.jsAnswer(nats, ["purge", "FEED"])
        #expect(purged.lines.first?["success"] == .bool(true), "\(purged.error)")
        _ = try FleetTests.jsAnswer(nats, ["publish", "FEED", "feed.other", "again not the bridge's"])
        // The bridge's next message after the purge and the foreign one: refused, read again.
        upstream.command("ticker 200 64 1000")
        try await awaitStatus(bridgeSocket, "every message acknowledged", timeout: .seconds(60)) { s in
            s.seq >= 2000 && s.fleet?.acknowledgedThrough == s.seq
        }
        #expect(await app.lines.wait(timeout: .seconds(30)) { $0.contains(#"{\"tick\":2000,"#) } != nil)
        // The bridge again, on a purged stream: nothing to read its numbers from.
        bridge.stop()
        _ = try FleetTests.jsAnswer(nats, ["purge", "FEED"])
        (bridge, _) = try await Self.bridge(dir, upstream: upstream, nats: nats)
        upstream.command(#"send {"tick":2001}"#)
        #expect(await app.lines.wait(timeout: .seconds(30)) { $0.contains(#"{\"tick\":2001}"#) } != nil, "\(follower.stderr.text.suffix(2000))")
        // Back to one message of the stream each: the stream's are numbered, so its are too.
        bridge.stop()
        (bridge, _) = try await Self.bridge(dir, upstream: upstream, nats: nats, batch: 1)
        upstream.command(#"send {"tick":2002}"#)
        #expect(await app.lines.wait(timeout: .seconds(30)) { $0.contains(#"{\"tick\":2002}"#) } != nil, "\(bridge.stderr.text.suffix(2000))")
        let (ok, why) = Self.whole(FleetFollowerTests.ticks(app), 2002, sameSeq: false)
        #expect(ok, "\(why)")
        let seqs = FleetFollowerTests.ticks(app).map(\.seq)
        #expect(
            seqs.suffix(3).first.map { $0 < seqs[seqs.count - 2] } == true && seqs[seqs.count - 2] >= 1000,
            "the restarted bridge's message numbered \(seqs.suffix(3))")
        #expect(seqs.last == seqs[seqs.count - 2] + 1, "one each, numbered on: \(seqs.suffix(3))")
        let status = try daemonStatus(bridgeSocket)
        #expect(status.fleet?.lost == 0 && status.fleet?.lastError == nil, "\(String(describing: status.fleet))")
    }
}
