import Foundation
import Testing
import WSBridgeProtocol

/// `[fleet]` (docs/fleet.md) against Debian's nats-server with JetStream on: every message the
/// daemon numbers goes into the stream, in order, with its seq and stream as headers and a
/// `Nats-Msg-Id`, through the NATS C client (loaded at run time).
@Suite(.serialized) struct FleetTests {
    static func jetStream(_ dir: TemporaryDirectory, client: Int = 0) async throws -> NATSServer {
        try await NATSServer.start(dir, client: client, extra: "jetstream { store_dir: \"\(dir.file("js"))\" }")
    }

    /// Tests/peers/jetstream.py against `server`: the JSON lines it printed.
    static func js(_ server: NATSServer, _ arguments: [String]) throws -> [JSONValue] {
        try Self.jsAnswer(server, arguments).lines
    }

    /// Tests/peers/jetstream.py against `server`: the JSON lines it printed and what it said on
    /// stderr (why it printed none).
    static func jsAnswer(_ server: NATSServer, _ arguments: [String]) throws -> (lines: [JSONValue], error: String) {
        let r = try spawnAndWait(Paths.python, ["\(Paths.root)/Tests/peers/jetstream.py", "--port", "\(server.client)"] + arguments)
        return (r.stdout.split(separator: "\n").compactMap { try? JSONValue.parse(String($0)) }, r.stderr)
    }

    static func daemon(_ dir: TemporaryDirectory, url: String, nats: NATSServer, fleet: String = "") async throws -> (ManagedProcess, String) {
        let socket = dir.file("d.sock")
        let config = try writeDaemonConfig(
            dir, "wsbridged", url: url, socket: socket,
            extra: "[fleet]\nservers = [\"nats://127.0.0.1:\(nats.client)\"]\nstream = \"FEED\"\nsubject = \"feed.ticks\"\n" + fleet)
        let daemon = try ManagedProcess.daemon(["--config", config], name: "wsbridged")
        guard await daemon.awaitLink(.open) else { throw TestFailure(daemon.stderr.text) }
        return (daemon, socket)
    }

    /// The stream's messages: JetStream's seq, the daemon's seq and stream, the id, the data.
    static func stored(_ server: NATSServer) throws -> [(js: Int, seq: Int, stream: String, id: String, data: String)] {
        let r = try spawnAndWait(Paths.python, ["\(Paths.root)/Tests/peers/jetstream.py", "--port", "\(server.client)", "messages", "FEED"])
        // A listing cut short would read as messages missing from the stream.
        guard r.status == 0 else { throw TestFailure("listing the stream FEED failed: \(r.stderr.suffix(1000))") }
        return r.stdout.split(separator: "\n").compactMap { try? JSONValue.parse(String($0)) }.map { m in
            (
                m["seq"]?.intValue ?? 0, Int(m.value(at: "headers.Wsbridge-Seq")?.stringValue ?? "") ?? 0,
                m.value(at: "headers.Wsbridge-Stream")?.stringValue ?? "", m.value(at: "headers.Nats-Msg-Id")?.stringValue ?? "",
                m["data"]?.stringValue ?? ""
            )
        }
    }

    /// A JetStream server with the stream FEED, the test upstream, and a daemon publishing its
    /// messages into the stream (connected).
    static func publishing() async throws -> (TemporaryDirectory, NATSServer, UpstreamServer, ManagedProcess, String) {
        let dir = try TemporaryDirectory()
        let nats = try await Self.jetStream(dir)
        guard try Self.js(nats, ["create-stream", "FEED", "feed.>"]).first?["name"] == "FEED" else {
            nats.process.stop()
            throw TestFailure("the stream was not made")
        }
        let upstream = try await UpstreamServer(.nio)
        let (daemon, socket) = try await Self.daemon(dir, url: upstream.url, nats: nats)
        try await awaitStatus(socket, "the fleet connected") { $0.fleet?.state == "connected" }
        return (dir, nats, upstream, daemon, socket)
    }

    static func inOrderOnce(_ seqs: [Int], _ count: Int) -> Bool { seqs == Array(1...count) }

    /// What differs from 1...count: how many, missing, twice, out of order (the first few).
    static func summary(_ seqs: [Int], _ count: Int) -> String {
        let twice = Dictionary(grouping: seqs, by: { $0 }).filter { $0.value.count > 1 }.keys.sorted()
        let missing = Set(1...count).subtracting(seqs).sorted()
        let disorder = zip(seqs, seqs.dropFirst()).enumerated().filter { $0.element.1 < $0.element.0 }.map { "\($0.element.0)>\($0.element.1) at \($0.offset)" }
        return
            "\(seqs.count) stored; missing \(missing.count) \(missing.prefix(8)); twice \(twice.count) \(twice.prefix(8)); out of order \(disorder.prefix(5))"
    }

    @Test func everyMessageGoesIntoTheStreamInOrderWithItsSeq() async throws {
        let (dir, nats, upstream, daemon, socket) = try await Self.publishing()
        defer {
            daemon.stop()
            nats.process.stop()
            _ = dir  // (kept until the end: the server's store is in it)
        }
        let reader = try SocketClient(path: socket, name: "reader")
        guard let hello = await reader.lines.wait(containing: #""type":"hello""#), let stream = try JSONValue.parse(hello)["stream"]?.stringValue
        else { throw TestFailure("no hello") }
        upstream.command("ticker 1000 64 2000")
        try await awaitStatus(socket, "2000 messages acknowledged by JetStream") { ($0.fleet?.acknowledgedThrough ?? 0) >= 2000 }
        let status = try daemonStatus(socket)
        #expect(status.fleet?.lag == 0 && status.fleet?.lost == 0 && status.fleet?.inFlight == 0, "\(String(describing: status.fleet))")
        let stored = try Self.stored(nats)
        #expect(Self.inOrderOnce(stored.map(\.seq), 2000), "\(Self.summary(stored.map(\.seq), 2000))")
        #expect(stored.map(\.js) == Array(1...2000))
        #expect(stored.allSatisfy { $0.stream == stream && $0.id == "\(stream)-\($0.seq)" })
        // The same bytes the local subscriber got under the same seq.
        let local = reader.lines.lines.compactMap { try? JSONValue.parse($0) }.filter { $0["type"] == "message" }
        let bySeq = Dictionary(local.compactMap { m in m["seq"]?.intValue.map { ($0, m["data"]?.stringValue ?? "") } }) { a, _ in a }
        #expect(stored.allSatisfy { bySeq[$0.seq] == $0.data }, "data differs")
    }

    /// A message JetStream acknowledged is let go: the NATS client hands each published message
    /// back with its acknowledgement, for the daemon to destroy. Two rounds of 200,000 messages,
    /// each waited out until every one is acknowledged: the second adds little to the bridge's
    /// memory (the replay ring and the allocator's arenas are at their size after the first; at
    /// most a round's messages waiting for NATS on a loaded machine, ~50 MB); a message kept
    /// would add about 1 KiB each, 200 MB a round.
    @Test func anAcknowledgedMessageIsLetGo() async throws {
        let (dir, nats, upstream, daemon, socket) = try await Self.publishing()
        defer {
            daemon.stop()
            nats.process.stop()
            _ = dir
        }
        func round(_ through: Int) async throws -> Double {
            upstream.command("flood 200000 100 20000")
            try await awaitStatus(socket, "\(through) messages acknowledged", timeout: .seconds(240)) { s in
                s.seq >= through && s.fleet?.acknowledgedThrough == s.seq && s.fleet?.inFlight == 0
            }
            let status = try String(contentsOfFile: "/proc/\(daemon.pid)/status", encoding: .utf8)
            let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") })
            return try #require(Double(line.split(separator: " ", omittingEmptySubsequences: true)[1])) / 1024
        }
        // Each flood is 200,000 messages and its end marker.
        let first = try await round(200_001)
        let second = try await round(400_002)
        #expect(
            second - first < 100,
            "the bridge's memory grew \(second - first) MiB over 200,000 acknowledged messages (\(first) → \(second) MiB): a published message outlives its acknowledgement (NATSHandlers.ack owns it and must destroy it)"
        )
        #expect(try daemonStatus(socket).fleet?.lost == 0)
    }

    /// NATS killed (-9) while the feed flows, and started again on its port with its store: the
    /// messages wait, then go; JetStream has every one once, in order.
    @Test func aNATSRestartWhileFlowingLosesNothingAndDoublesNothing() async throws {
        let (dir, first, upstream, daemon, socket) = try await Self.publishing()
        var nats = first
        defer {
            daemon.stop()
            nats.process.stop()
        }
        upstream.command("ticker 500 64 4000")
        try await awaitStatus(socket, "500 acknowledged") { ($0.fleet?.acknowledgedThrough ?? 0) >= 500 }
        nats.process.signal(SIGKILL)
        _ = await nats.process.waitForExit()
        try await awaitStatus(socket, "the fleet to see NATS gone") { $0.fleet?.state == "disconnected" }
        try await awaitStatus(socket, "messages waiting meanwhile") { ($0.fleet?.lag ?? 0) > 200 }
        nats = try await Self.jetStream(dir, client: nats.client)
        try await awaitStatus(socket, "every message acknowledged", timeout: .seconds(60)) { s in
            s.seq >= 4000 && s.fleet?.acknowledgedThrough == s.seq
        }
        let stored = try Self.stored(nats)
        #expect(Self.inOrderOnce(stored.map(\.seq), 4000), "\(Self.summary(stored.map(\.seq), 4000))")
        #expect(try daemonStatus(socket).fleet?.lost == 0)
    }

    /// NATS killed while 4 MB flow with `max_backlog_bytes` at 1 MiB and a journal: the newest
    /// leave memory and go into the stream from the journal once NATS is back: every message once,
    /// in order, none given up; one message of the stream each, and in batches (`fleet.batch`:
    /// those read back from the journal go in batches too).
    @Test(arguments: [1, 100])
    func pastTheBacklogBoundTheJournalHasThemAndNothingIsLost(batch: Int) async throws {
        let dir = try TemporaryDirectory()
        var nats = try await Self.jetStream(dir)
        defer { nats.process.stop() }
        guard try Self.js(nats, ["create-stream", "FEED", "feed.>"]).first?["name"] == "FEED" else { throw TestFailure("no stream") }
        let upstream = try await UpstreamServer(.nio)
        let (daemon, socket) = try await Self.daemon(
            dir, url: upstream.url, nats: nats, fleet: "max_backlog_bytes = 1048576\nbatch = \(batch)\n[journal]\ndir = \"\(dir.file("journal"))\"\n")
        defer { daemon.stop() }
        try await awaitStatus(socket, "the fleet connected") { $0.fleet?.state == "connected" }
        nats.process.signal(SIGKILL)
        _ = await nats.process.waitForExit()
        try await awaitStatus(socket, "the fleet to see NATS gone") { $0.fleet?.state == "disconnected" }
        upstream.command("ticker 2000 512 8000")
        try await awaitStatus(socket, "8,000 numbered while NATS is away") { $0.seq >= 8000 }
        let away = try daemonStatus(socket)
        // 4 MB numbered; past the bound (2,048 messages of 512 bytes) the newest left memory down
        // to half of it, and nothing is read back from the journal while NATS is away (it would
        // sit in memory past the bound).
        #expect((away.fleet?.waiting ?? 0) <= 1024 && away.fleet?.lag == 8000, "\(String(describing: away.fleet))")
        nats = try await Self.jetStream(dir, client: nats.client)
        try await awaitStatus(socket, "every message acknowledged", timeout: .seconds(60)) { $0.fleet?.acknowledgedThrough == 8000 }
        let stored = try Self.stored(nats)
        #expect(Self.inOrderOnce(stored.map(\.seq), 8000), "\(Self.summary(stored.map(\.seq), 8000))")
        if batch > 1 {
            let messages = Set(stored.map(\.js)).count
            #expect(messages < 8000 / 10, "8,000 messages in \(messages) of the stream")
        }
        let after = try daemonStatus(socket)
        #expect(after.fleet?.lost == 0 && after.fleet?.lag == 0, "\(String(describing: after.fleet))")
    }

    /// `upstream.protocol = "json"`: the events routed to one app are numbered, not the stream's;
    /// the broadcasts between them go into the stream in order, each expecting the one published
    /// before it (not the seq before it), and `acknowledged_through` passes the routed seqs.
    @Test func aProtocolsMessagesForOneAppStayOutAndPublishingGoesOn() async throws {
        let dir = try TemporaryDirectory()
        let nats = try await Self.jetStream(dir)
        defer { nats.process.stop() }
        guard try Self.js(nats, ["create-stream", "FEED", "feed.>"]).first?["name"] == "FEED" else { throw TestFailure("no stream") }
        let (peer, port) = try await JSONProtocolTests.peer()
        defer { peer.stop() }
        let (daemon, socket) = try await protocolDaemon(
            dir, url: "ws://127.0.0.1:\(port)/", protocol: "json",
            settings: "id = \"id\"\n[[protocol.reply]]\nwhen = \"ping\"\nsend = '{\"pong\":${msg:ping}}'\n"
                + "[fleet]\nservers = [\"nats://127.0.0.1:\(nats.client)\"]\nstream = \"FEED\"\nsubject = \"feed.ticks\"\n")
        defer { daemon.stop() }
        let app = try await JSONRPCProtocolTests.app(socket, "a")
        JSONProtocolTests.subscribe(app, id: 2, type: "alpha", request: "sa")
        #expect(await JSONRPCProtocolTests.waitFor(app) { $0["type"] == "event" && ($0.value(at: "event.n")?.intValue ?? 0) >= 10 } != nil)
        // Broadcasts after routed events are stored, all of them: nothing waits behind a routed seq.
        try await awaitStatus(socket, "10 broadcasts acknowledged, none left behind") { s in
            (s.fleet?.acknowledged ?? 0) >= 10 && s.fleet?.inFlight == 0 && s.fleet?.waiting == 0
        }
        let stored = try Self.stored(nats)
        let seqs = stored.map(\.seq)
        #expect(zip(seqs, seqs.dropFirst()).allSatisfy { $0 < $1 }, "\(seqs.prefix(20))")
        #expect(stored.allSatisfy { $0.data.contains(#""id": "BTC""#) || $0.data.contains(#""id":"BTC""#) }, "\(stored.prefix(3).map(\.data))")
        #expect(stored.count >= 10 && seqs.count < (seqs.last ?? 0), "routed seqs are not in the stream: \(seqs.prefix(20))")
    }

    /// A 3-node JetStream cluster on loopback: each node its own directory and ports, routes to
    /// the others; a node started again keeps its store and ports. Its name is its own, so no node
    /// of another test's cluster can join it through a port that test let go.
    struct Cluster {
        let dirs: [TemporaryDirectory]
        let routes: [Int]
        let clients: [Int]
        let name = "fleet-\(UInt32.random(in: 0...UInt32.max))"

        init() throws {
            self.dirs = try (0..<3).map { _ in try TemporaryDirectory() }
            self.routes = try (0..<3).map { _ in try freePort() }
            self.clients = try (0..<3).map { _ in try freePort() }
        }

        /// The three nodes, and the stream FEED on all three (stopped again if that fails). The
        /// stream is made once every node reports the same JetStream meta leader of a 3-node
        /// group (`/jsz`), which is the cluster's own readiness: a request made before that is
        /// not answered at all.
        func startWithStream() async throws -> [NATSServer] {
            let nodes = try await self.startEmpty()
            do {
                try await eventually(
                    "the stream FEED made on the 3 nodes", timeout: .seconds(60), every: .milliseconds(200),
                    { [nodes] in try FleetTests.jsAnswer(nodes[1], ["create-stream", "FEED", "feed.>", "--replicas", "3"]) },
                    until: { $0.lines.first?["name"] == "FEED" })
                return nodes
            } catch {
                for node in nodes { node.process.stop() }
                throw error
            }
        }

        /// The three nodes, once every node reports the same JetStream meta leader of a 3-node
        /// group (stopped again if they do not).
        func startEmpty() async throws -> [NATSServer] {
            var nodes: [NATSServer] = []
            do {
                // All three at once, as a cluster is started: one after the other on a busy
                // machine, the first two once formed a meta group of 2 before the third was up,
                // and the third never joined it.
                async let n0 = self.started(0)
                async let n1 = self.started(1)
                async let n2 = self.started(2)
                let results = [await n0, await n1, await n2]
                nodes = results.compactMap { try? $0.get() }
                for result in results { _ = try result.get() }
                try await eventually(
                    "one JetStream meta leader of 3 seen by each node (/jsz)", timeout: .seconds(120), every: .milliseconds(200),
                    { [nodes] in nodes.map(Self.metaCluster) },
                    until: { seen in seen.allSatisfy { $0.size == 3 && !$0.leader.isEmpty && $0.leader == seen[0].leader } })
                return nodes
            } catch {
                for node in nodes { node.process.stop() }
                // What each node said last: a node that never joined tells why in its log.
                let logs = nodes.enumerated().map { i, node in "n\(i): \(node.process.stderr.lines.suffix(6).joined(separator: " | "))" }
                throw TestFailure("\(error)\n\(logs.joined(separator: "\n"))")
            }
        }

        /// What a node's `/jsz` says of its meta group: the leader's name and the group's size
        /// (empty and 0 while it has none, or when the node does not answer).
        static func metaCluster(_ node: NATSServer) -> (leader: String, size: Int) {
            guard let r = try? spawnAndWait("/usr/bin/curl", ["-sf", "http://127.0.0.1:\(node.monitor)/jsz"]),
                let jsz = try? JSONValue.parse(r.stdout)
            else { return ("", 0) }
            return (jsz.value(at: "meta_cluster.leader")?.stringValue ?? "", jsz.value(at: "meta_cluster.cluster_size")?.intValue ?? 0)
        }

        /// Node `i` started, or why not.
        func started(_ i: Int) async -> Result<NATSServer, any Error> {
            do {
                return .success(try await self.start(i))
            } catch {
                return .failure(error)
            }
        }

        func start(_ i: Int) async throws -> NATSServer {
            let others = (0..<3).filter { $0 != i }.map { "\"nats-route://127.0.0.1:\(self.routes[$0])\"" }.joined(separator: ", ")
            return try await NATSServer.start(
                self.dirs[i], client: self.clients[i],
                extra: """
                    server_name: n\(i)
                    jetstream { store_dir: "\(self.dirs[i].file("js"))" }
                    cluster { name: \(self.name), listen: "127.0.0.1:\(self.routes[i])", routes: [\(others)] }
                    """)
        }
    }

    /// One node of a 3-node cluster killed (-9) while the feed flows into a stream replicated on
    /// all three, and started again: JetStream has every message once, in order.
    @Test func aClusterNodeKilledWhileFlowingLosesNothingAndDoublesNothing() async throws {
        let cluster = try Cluster()
        var nodes = try await cluster.startWithStream()
        defer { for node in nodes { node.process.stop() } }
        let clients = cluster.clients
        let upstream = try await UpstreamServer(.nio)
        let dir = try TemporaryDirectory()
        let socket = dir.file("d.sock")
        let servers = clients.map { "\"nats://127.0.0.1:\($0)\"" }.joined(separator: ", ")
        let config = try writeDaemonConfig(
            dir, "wsbridged", url: upstream.url, socket: socket,
            extra: "[fleet]\nservers = [\(servers)]\nstream = \"FEED\"\nsubject = \"feed.ticks\"\nack_timeout = \"1s\"\n")
        let daemon = try ManagedProcess.daemon(["--config", config], name: "wsbridged")
        defer { daemon.stop() }
        guard await daemon.awaitLink(.open) else { throw TestFailure(daemon.stderr.text) }
        try await awaitStatus(socket, "the fleet connected", timeout: .seconds(60)) { $0.fleet?.state == "connected" }
        upstream.command("ticker 500 64 4000")
        try await awaitStatus(socket, "500 acknowledged") { ($0.fleet?.acknowledgedThrough ?? 0) >= 500 }
        nodes[0].process.signal(SIGKILL)
        _ = await nodes[0].process.waitForExit()
        let killedAt = try daemonStatus(socket).fleet?.acknowledgedThrough ?? 0
        try await awaitStatus(socket, "publishing on without node 0", timeout: .seconds(60)) { ($0.fleet?.acknowledgedThrough ?? 0) >= killedAt + 500 }
        nodes[0] = try await cluster.start(0)
        try await awaitStatus(socket, "every message acknowledged", timeout: .seconds(90)) { s in
            s.seq >= 4000 && s.fleet?.acknowledgedThrough == s.seq
        }
        let stored = try Self.stored(nodes[1])
        let seqs = stored.map(\.seq)
        #expect(Self.inOrderOnce(seqs, 4000), "\(Self.summary(seqs, 4000)); the daemon: \(daemon.stderr.text.suffix(3000))")
        #expect(try daemonStatus(socket).fleet?.lost == 0)
    }
}
