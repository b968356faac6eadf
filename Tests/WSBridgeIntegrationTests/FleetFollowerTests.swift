import Foundation
import Testing
import WSBridgeProtocol

/// `[fleet] role = "follower"` (docs/fleet.md) against Debian's nats-server with JetStream on: a
/// bridge publishes the test upstream's messages into the stream; a follower (a second daemon,
/// its own socket) serves them to its apps with the stream's seqs, resumes after its restart,
/// and its apps' sends reach the upstream through the bridge.
@Suite(.serialized) struct FleetFollowerTests {
    /// The bridge's and the follower's `[fleet]`, with the NATS servers at these client ports.
    static func fleet(_ ports: [Int], role: String) -> String {
        let servers = ports.map { "\"nats://127.0.0.1:\($0)\"" }.joined(separator: ", ")
        return "[fleet]\nrole = \"\(role)\"\nservers = [\(servers)]\nstream = \"FEED\"\nsubject = \"feed.ticks\"\nack_timeout = \"2s\"\n"
    }

    /// A follower with a journal in `dir/journal` (its position across restarts).
    static func follower(_ dir: TemporaryDirectory, nats: NATSServer) async throws -> (ManagedProcess, String) {
        try await Self.follower(dir, ports: [nats.client])
    }

    /// `upstream`: more of its [upstream] (its bridge's `protocol`, which takes no journal);
    /// `local`: more of its [local].
    static func follower(_ dir: TemporaryDirectory, ports: [Int], name: String = "follower", upstream: String = "", local: String = "") async throws
        -> (ManagedProcess, String)
    {
        let socket = dir.file("\(name).sock")
        let journal = upstream.isEmpty ? "[journal]\ndir = \"\(dir.file("\(name)-journal"))\"\n" : ""
        let config = try writeDaemonConfig(
            dir, name, url: "ws://127.0.0.1:9/unused", socket: socket, upstream: upstream,
            extra: local + "\n" + journal + Self.fleet(ports, role: "follower"))
        let daemon = try ManagedProcess.daemon(["--config", config], name: name)
        // Ready (its socket listens) and following: the follower starts before it listens, so
        // its link may open first.
        guard await daemon.awaitReady(timeout: .seconds(30)), await daemon.awaitLink(.open, timeout: .seconds(30)) else {
            throw TestFailure("the follower never followed: \(daemon.stderr.text.suffix(3000))")
        }
        return (daemon, socket)
    }

    /// NATS with the stream FEED, the test upstream, a bridge publishing into the stream.
    static func bridge() async throws -> (TemporaryDirectory, NATSServer, UpstreamServer, ManagedProcess, String) {
        let dir = try TemporaryDirectory()
        let nats = try await FleetTests.jetStream(dir)
        guard try FleetTests.js(nats, ["create-stream", "FEED", "feed.>"]).first?["name"] == "FEED" else {
            nats.process.stop()
            throw TestFailure("the stream was not made")
        }
        let upstream = try await UpstreamServer(.nio)
        let socket = dir.file("bridge.sock")
        let config = try writeDaemonConfig(dir, "bridge", url: upstream.url, socket: socket, extra: Self.fleet([nats.client], role: "bridge"))
        let bridge = try ManagedProcess.daemon(["--config", config], name: "bridge")
        guard await bridge.awaitLink(.open) else { throw TestFailure(bridge.stderr.text) }
        try await awaitStatus(socket, "the bridge's fleet connected") { $0.fleet?.state == "connected" }
        return (dir, nats, upstream, bridge, socket)
    }

    /// The message lines `client` read from line `from` on: (seq, tick).
    static func ticks(_ client: SocketClient, from: Int = 0) -> [(seq: Int, tick: Int)] {
        client.lines.lines.dropFirst(from).compactMap { line in
            guard line.contains(#""type":"message""#), let json = try? JSONValue.parse(line), let seq = json["seq"]?.intValue,
                let tick = JournalTests.tick(json)
            else { return nil }
            return (seq, tick)
        }
    }

    /// The follower's app gets every message in order, numbered as the stream numbers it; after
    /// the follower's restart while the feed flows (graceful, or `kill -9`: its journal's last
    /// records torn or missing, which the stream has), `since` resumes with nothing lost or
    /// doubled and no gap.
    @Test(arguments: [false, true])
    func aFollowersAppGetsEveryMessageInOrderAndResumesAcrossItsRestart(killed: Bool) async throws {
        let (dir, nats, upstream, bridge, _) = try await Self.bridge()
        var (follower, socket) = try await Self.follower(dir, nats: nats)
        defer {
            follower.stop()
            bridge.stop()
            nats.process.stop()
        }
        let before = try SocketClient(path: socket, name: "before")
        guard let hello = await before.lines.wait(containing: #""type":"hello""#), let stream = try JSONValue.parse(hello)["stream"]?.stringValue
        else { throw TestFailure("no hello") }
        upstream.command("ticker 1000 64 3000")
        #expect(await JournalTests.waitForSeq(before, 800))
        follower.signal(killed ? SIGKILL : SIGTERM)
        _ = await follower.waitForExit()
        // The app had handled 500 of them: it resumes from there (the follower's journal has
        // them, and the restart's segment after them).
        let first = Self.ticks(before).filter { $0.seq <= 500 }
        let since = try #require(first.last?.seq)
        (follower, socket) = try await Self.follower(dir, nats: nats)
        #expect(stream == "jetstream-FEED")
        let (after, _, from) = try await JournalTests.resume(socket, since: since, stream: stream, name: "after")
        #expect(await JournalTests.waitForSeq(after, 3000, from: from, timeout: .seconds(60)), "\(after.lines.lines.suffix(3))")
        let all = first + Self.ticks(after, from: from)
        let gaps = after.lines.lines.dropFirst(from).filter { $0.contains(#""type":"gap""#) }
        #expect(gaps.isEmpty, "\(gaps)")
        let inOrderOnce = all.map(\.seq) == Array(1...3000)
        #expect(inOrderOnce, "\(FleetTests.summary(all.map(\.seq), 3000))")
        // The stream's seq is the message's place in it: tick n is the nth message.
        let numbered = all.allSatisfy { $0.tick == $0.seq }
        #expect(numbered, "\(all.filter { $0.tick != $0.seq }.prefix(5))")
        let status = try daemonStatus(socket)
        #expect(status.fleet?.role == "follower" && status.fleet?.streamSeq == 3000, "\(String(describing: status.fleet))")
    }

    /// A follower whose stream stops advancing says so in `status` (and once in its log), and
    /// stops saying it once the stream moves on.
    @Test func aFollowerWhoseStreamStopsSaysSo() async throws {
        let (dir, nats, upstream, bridge, _) = try await Self.bridge()
        let (follower, socket) = try await Self.follower(dir, nats: nats)
        defer {
            follower.stop()
            bridge.stop()
            nats.process.stop()
        }
        let app = try await SocketClient.connected(to: socket, name: "app", daemon: follower)
        upstream.command("ticker 100 64 50")
        #expect(await JournalTests.waitForSeq(app, 50))
        #expect(try daemonStatus(socket).fleet?.stalledSeconds == nil, "a stream that just advanced is not stalled")
        try await awaitStatus(socket, "the follower says its stream stopped", timeout: .seconds(60)) { ($0.fleet?.stalledSeconds ?? 0) >= 10 }
        upstream.command("ticker 100 64 10")
        #expect(await JournalTests.waitForSeq(app, 60))
        #expect(try daemonStatus(socket).fleet?.stalledSeconds == nil, "the stream moved on")
    }

    /// A follower's app's `send` and `request` reach the upstream through the bridge; the
    /// request is answered by the message the upstream sends back, as the follower numbers it.
    @Test func aFollowersSendAndRequestReachTheUpstreamAndAreAnswered() async throws {
        let (dir, nats, upstream, bridge, _) = try await Self.bridge()
        let (follower, socket) = try await Self.follower(dir, nats: nats)
        defer {
            follower.stop()
            bridge.stop()
            nats.process.stop()
        }
        let app = try await SocketClient.connected(to: socket, name: "app", daemon: follower)
        // A filtered subscriber and `wsbridgectl tail` on the follower, as on a bridge.
        let filtered = try await SocketClient.connected(to: socket, name: "filtered", daemon: follower)
        filtered.send(#"{"id":"f","op":"subscribe","filter":{"field":"rid","equals":41}}"#)
        #expect(await filtered.reply("f")?["ok"] == true)
        let tail = try ManagedProcess("\(Paths.bin)/wsbridgectl", ["--socket", socket, "tail"], name: "tail")
        defer { tail.stop() }
        #expect(await tail.stderr.wait(containing: "following") != nil, "\(tail.stderr.text)")
        app.send(#"{"op":"send","id":1,"text":"{\"hello\":\"from a follower\"}"}"#)
        let sent = await app.lines.wait { $0.contains(#""id":1"#) && !$0.contains(#""type":"message""#) }
        #expect(sent?.contains(#""ok":true"#) == true, "\(sent ?? "no reply")")
        // The test upstream echoes: the echo goes into the stream and back to the follower.
        #expect(await app.lines.wait(containing: #"from a follower"#) != nil)
        app.send(#"{"op":"request","id":2,"text":"{\"rid\":41,\"q\":1}","match":{"field":"rid","equals":41},"timeout":10}"#)
        let answer = await app.lines.wait { $0.contains(#""id":2"#) }
        let json = try JSONValue.parse(try #require(answer))
        #expect(json["ok"] == true, "\(answer ?? "")")
        #expect(json.value(at: "result.json.rid")?.intValue == 41, "\(answer ?? "")")
        let seq = try #require(json.value(at: "result.seq")?.intValue)
        #expect(try daemonStatus(socket).seq == seq, "the answer's seq is the follower's (the stream's)")
        // The filter took the answer only; tail printed both messages as they came.
        #expect(await filtered.lines.wait { $0.contains(#""type":"message""#) && $0.contains(#"\"rid\":41"#) } != nil)
        #expect(filtered.messages.count == 1, "\(filtered.messages)")
        #expect(await tail.stdout.wait(containing: #"{"rid":41,"q":1}"#) != nil)
        #expect(tail.stdout.lines.first == #"{"hello":"from a follower"}"#, "\(tail.stdout.lines)")
        #expect(await upstream.event(#"message {"hello":"from a follower"}"#) != nil)
        let status = try daemonStatus(socket)
        #expect(status.fleet?.forwarded == 2, "\(String(describing: status.fleet))")
    }

    /// Every message line `client` read, in order, is seq 1...count once each (the stream's).
    static func expectAll(_ client: SocketClient, _ count: Int, _ what: String) {
        let seqs = Self.ticks(client).map(\.seq)
        let inOrderOnce = seqs == Array(1...count)
        #expect(inOrderOnce, "\(what): \(FleetTests.summary(seqs, count))")
    }

    /// A 3-node cluster, the stream on all three; the node the follower is connected to killed
    /// (-9) while the feed flows, and started again: the follower's app, connected throughout,
    /// gets every message once, in order.
    @Test func aFollowersNodeKilledWhileFlowingLosesNothingAndDoublesNothing() async throws {
        let cluster = try FleetTests.Cluster()
        var nodes = try await cluster.startWithStream()
        defer { for node in nodes { node.process.stop() } }
        let upstream = try await UpstreamServer(.nio)
        let dir = try TemporaryDirectory()
        let bridgeSocket = dir.file("bridge.sock")
        let config = try writeDaemonConfig(dir, "bridge", url: upstream.url, socket: bridgeSocket, extra: Self.fleet(cluster.clients, role: "bridge"))
        let bridge = try ManagedProcess.daemon(["--config", config], name: "bridge")
        defer { bridge.stop() }
        guard await bridge.awaitLink(.open) else { throw TestFailure(bridge.stderr.text) }
        try await awaitStatus(bridgeSocket, "the bridge's fleet connected", timeout: .seconds(60)) { $0.fleet?.state == "connected" }
        let (follower, socket) = try await Self.follower(dir, ports: cluster.clients)
        defer { follower.stop() }
        let app = try await SocketClient.connected(to: socket, name: "app", daemon: follower)
        upstream.command("ticker 500 64 4000")
        #expect(await JournalTests.waitForSeq(app, 500))
        let server = try #require(try daemonStatus(socket).fleet?.server, "the follower's server")
        let killed = try #require(cluster.clients.firstIndex { server.hasSuffix(":\($0)") }, "\(server) is none of \(cluster.clients)")
        nodes[killed].process.signal(SIGKILL)
        _ = await nodes[killed].process.waitForExit()
        let at = Self.ticks(app).last?.seq ?? 0
        #expect(await JournalTests.waitForSeq(app, at + 500, timeout: .seconds(60)), "the follower goes on through another node")
        nodes[killed] = try await cluster.start(killed)
        #expect(await JournalTests.waitForSeq(app, 4000, timeout: .seconds(90)), "\(follower.stderr.text.suffix(2000))")
        Self.expectAll(app, 4000, "the follower's app")
        #expect(try daemonStatus(bridgeSocket).fleet?.lost == 0)
    }

    /// All of NATS down for 30 s while the feed flows at 1,000 a second: the three nodes of the
    /// cluster killed (-9), started again 30 s later with their stores. The bridge's own
    /// subscriber keeps its feed meanwhile; once the cluster is back the backlog is published, and
    /// the follower's app (connected throughout) gets every message once, in order.
    @Test func allOfNATSDownFor30sLosesNothing() async throws {
        let cluster = try FleetTests.Cluster()
        var nodes = try await cluster.startWithStream()
        defer { for node in nodes { node.process.stop() } }
        let dir = try TemporaryDirectory()
        let upstream = try await UpstreamServer(.nio)
        let bridgeSocket = dir.file("bridge.sock")
        let config = try writeDaemonConfig(dir, "bridge", url: upstream.url, socket: bridgeSocket, extra: Self.fleet(cluster.clients, role: "bridge"))
        let bridge = try ManagedProcess.daemon(["--config", config], name: "bridge")
        defer { bridge.stop() }
        guard await bridge.awaitLink(.open) else { throw TestFailure(bridge.stderr.text) }
        try await awaitStatus(bridgeSocket, "the bridge's fleet connected", timeout: .seconds(60)) { $0.fleet?.state == "connected" }
        // The backlog comes at once when the cluster is back: the app's queue holds all of it, so
        // that what is tested is the fleet's loss, not the app's own (a reader slower than the
        // backlog's burst drops, on the small send buffer it has until it reads fast).
        let (follower, socket) = try await Self.follower(dir, ports: cluster.clients, local: "subscriber_queue = 50000")
        defer { follower.stop() }
        let local = try await SocketClient.connected(to: bridgeSocket, name: "local", daemon: bridge)
        let app = try await SocketClient.connected(to: socket, name: "app", daemon: follower)
        upstream.command("ticker 1000 64 40000")
        #expect(await JournalTests.waitForSeq(app, 2000))
        for node in nodes { node.process.signal(SIGKILL) }
        for node in nodes { _ = await node.process.waitForExit() }
        let before = Self.ticks(local).last?.seq ?? 0
        // The outage is the scenario: 30 s of it, by the clock.
        try await Task.sleep(for: .seconds(30))
        let during = Self.ticks(local).last?.seq ?? 0
        #expect(during >= before + 5000, "the bridge's subscriber kept its feed: seq \(before) at the kill, \(during) 30 s later")
        #expect(try daemonStatus(bridgeSocket).fleet?.state != "connected")
        for i in 0..<3 { nodes[i] = try await cluster.start(i) }
        #expect(await JournalTests.waitForSeq(app, 40000, timeout: .seconds(180)), "\(follower.stderr.text.suffix(2000))")
        Self.expectAll(app, 40000, "the follower's app")
        Self.expectAll(local, 40000, "the bridge's subscriber")
        let status = try daemonStatus(bridgeSocket)
        #expect(status.fleet?.lost == 0 && status.fleet?.acknowledgedThrough == 40000, "\(String(describing: status.fleet))")
    }

    /// `subject = "feed.${msg:sym}"`: each message on its key's subject; a follower that takes
    /// `feed.BTC` gets those only, under their stream seqs.
    @Test func aSubjectPerKeyAndAFollowerOfOneKey() async throws {
        let dir = try TemporaryDirectory()
        let nats = try await FleetTests.jetStream(dir)
        defer { nats.process.stop() }
        guard try FleetTests.js(nats, ["create-stream", "FEED", "feed.>"]).first?["name"] == "FEED" else { throw TestFailure("no stream") }
        let upstream = try await UpstreamServer(.nio)
        let bridgeSocket = dir.file("bridge.sock")
        let fleet = Self.fleet([nats.client], role: "bridge").replacingOccurrences(of: "feed.ticks", with: "feed.${msg:sym}")
        let bridge = try ManagedProcess.daemon(
            ["--config", try writeDaemonConfig(dir, "bridge", url: upstream.url, socket: bridgeSocket, extra: fleet)], name: "bridge")
        defer { bridge.stop() }
        guard await bridge.awaitLink(.open) else { throw TestFailure(bridge.stderr.text) }
        try await awaitStatus(bridgeSocket, "the bridge's fleet connected") { $0.fleet?.state == "connected" }
        let socket = dir.file("follower.sock")
        let followerFleet = Self.fleet([nats.client], role: "follower").replacingOccurrences(of: "feed.ticks", with: "feed.BTC")
        let follower = try ManagedProcess.daemon(
            ["--config", try writeDaemonConfig(dir, "follower", url: "ws://127.0.0.1:9/unused", socket: socket, extra: followerFleet)], name: "follower")
        defer { follower.stop() }
        guard await follower.awaitReady(timeout: .seconds(30)), await follower.awaitLink(.open, timeout: .seconds(30)) else {
            throw TestFailure(follower.stderr.text.suffix(2000).description)
        }
        let app = try await SocketClient.connected(to: socket, name: "app", daemon: follower)
        let symbols = ["BTC", "ETH", "BTC", "SOL", "BTC", "ETH"]
        for (n, sym) in symbols.enumerated() { upstream.command(#"send {"sym":"\#(sym)","n":\#(n + 1)}"#) }
        upstream.command(#"send {"n":7}"#)
        try await awaitStatus(bridgeSocket, "7 acknowledged") { ($0.fleet?.acknowledgedThrough ?? 0) >= 7 }
        let stored = try FleetTests.js(nats, ["messages", "FEED"]).map { $0["subject"]?.stringValue ?? "" }
        #expect(stored == ["feed.BTC", "feed.ETH", "feed.BTC", "feed.SOL", "feed.BTC", "feed.ETH", "feed._"], "\(stored)")
        #expect(await JournalTests.waitForSeq(app, 5))
        let got = app.lines.lines.compactMap { try? JSONValue.parse($0) }.filter { $0["type"] == "message" }
        #expect(got.compactMap { $0["seq"]?.intValue } == [1, 3, 5], "\(got)")
        #expect(got.allSatisfy { $0["data"]?.stringValue?.contains(#""sym":"BTC""#) == true })
    }

    /// The sticky keys the daemon at `socket` holds (`wsbridgectl sticky --json`).
    static func stickyKeys(_ socket: String) throws -> [String] {
        let list = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", socket, "sticky", "--json"])
        return try StickyListResult(json: try JSONValue.parse(list.stdout)).keys.map(\.key)
    }

    /// A follower's app's sticky send is held by the bridge for it: sent upstream once, and let go
    /// of (its leave text sent) when the app leaves; another's, when the follower is killed and
    /// the bridge stops hearing it.
    @Test func aFollowersStickySendIsHeldByTheBridgeUntilItsAppOrTheFollowerGoes() async throws {
        let (dir, nats, upstream, bridge, bridgeSocket) = try await Self.bridge()
        let (follower, socket) = try await Self.follower(dir, nats: nats)
        defer {
            follower.stop()
            bridge.stop()
            nats.process.stop()
        }
        let app = try await SocketClient.connected(to: socket, name: "app", daemon: follower)
        app.send(#"{"op":"send","id":"k","text":"{\"sub\":\"alpha\"}","sticky":"alpha","on_unstick":"{\"unsub\":\"alpha\"}"}"#)
        let reply = await app.reply("k")
        #expect(reply?["ok"] == true, "\(String(describing: reply))")
        #expect(await upstream.event(#"message {"sub":"alpha"}"#) != nil, "the bridge sent it upstream")
        try await eventually("the bridge holds alpha", { try Self.stickyKeys(bridgeSocket) }, until: { $0 == ["alpha"] })
        app.close()
        try await eventually("the bridge lets alpha go", { try Self.stickyKeys(bridgeSocket) }, until: { $0.isEmpty })
        #expect(await upstream.event(#"message {"unsub":"alpha"}"#) != nil, "its leave text went upstream")
        let other = try await SocketClient.connected(to: socket, name: "other", daemon: follower)
        other.send(#"{"op":"send","id":"b","text":"{\"sub\":\"beta\"}","sticky":"beta"}"#)
        #expect(await other.reply("b")?["ok"] == true)
        try await eventually("the bridge holds beta", { try Self.stickyKeys(bridgeSocket) }, until: { $0 == ["beta"] })
        follower.signal(SIGKILL)
        _ = await follower.waitForExit()
        try await eventually("the bridge lets beta go once it stops hearing the follower", { try Self.stickyKeys(bridgeSocket) }, until: { $0.isEmpty })
    }

    /// A bridge and a follower started while NATS is not there yet: both wait (their sockets
    /// served), and once nats-server and the stream are up, the feed flows to the follower's app.
    @Test func aBridgeAndAFollowerStartedBeforeNATSGoOnOnceItIsUp() async throws {
        let dir = try TemporaryDirectory()
        let port = try freePort()
        let upstream = try await UpstreamServer(.nio)
        let bridgeSocket = dir.file("bridge.sock")
        let bridge = try ManagedProcess.daemon(
            ["--config", try writeDaemonConfig(dir, "bridge", url: upstream.url, socket: bridgeSocket, extra: Self.fleet([port], role: "bridge"))],
            name: "bridge")
        defer { bridge.stop() }
        guard await bridge.awaitLink(.open) else { throw TestFailure(bridge.stderr.text) }
        let socket = dir.file("follower.sock")
        let follower = try ManagedProcess.daemon(
            ["--config", try writeDaemonConfig(dir, "follower", url: "ws://127.0.0.1:9/unused", socket: socket, extra: Self.fleet([port], role: "follower"))],
            name: "follower")
        defer { follower.stop() }
        guard await follower.awaitReady() else { throw TestFailure(follower.stderr.text) }
        #expect(try daemonStatus(bridgeSocket).fleet?.state != "connected")
        #expect(try daemonStatus(socket).state == .connecting)
        let nats = try await FleetTests.jetStream(dir, client: port)
        defer { nats.process.stop() }
        guard try FleetTests.js(nats, ["create-stream", "FEED", "feed.>"]).first?["name"] == "FEED" else { throw TestFailure("no stream") }
        try await awaitStatus(bridgeSocket, "the bridge publishing") { $0.fleet?.state == "connected" }
        try await awaitStatus(socket, "the follower following") { $0.state == .open }
        let app = try await SocketClient.connected(to: socket, name: "app", daemon: follower)
        upstream.command("ticker 100 64 20")
        #expect(await JournalTests.waitForSeq(app, 20), "\(app.lines.text.suffix(500))")
    }
}
