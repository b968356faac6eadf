import Foundation
import Testing
import WSBridgeProtocol

/// `upstream.protocol` across a fleet (docs/fleet.md): the followers' apps are apps of the
/// bridge's protocol layer. Real servers: Debian's nats-server with JetStream for the fleet, and
/// as the upstream a second nats-server over WebSocket (`protocol = "nats"`) or the JSON-RPC peer.
@Suite(.serialized) struct FleetProtocolTests {
    /// The fleet's NATS with the stream FEED; a bridge on `url` with `protocol`; two followers.
    struct Fleet {
        let dir: TemporaryDirectory
        let nats: NATSServer
        let bridge: ManagedProcess
        let bridgeSocket: String
        let a: (daemon: ManagedProcess, socket: String)
        let b: (daemon: ManagedProcess, socket: String)

        static func start(url: String, protocol name: String) async throws -> Fleet {
            let dir = try TemporaryDirectory()
            let nats = try await FleetTests.jetStream(dir)
            guard try FleetTests.js(nats, ["create-stream", "FEED", "feed.>"]).first?["name"] == "FEED" else {
                nats.process.stop()
                throw TestFailure("the stream was not made")
            }
            let socket = dir.file("bridge.sock")
            let config = try writeDaemonConfig(
                dir, "bridge", url: url, socket: socket, upstream: "protocol = \"\(name)\"", extra: FleetFollowerTests.fleet([nats.client], role: "bridge"))
            let bridge = try ManagedProcess.daemon(["--config", config], name: "bridge")
            guard await bridge.awaitLink(.open) else { throw TestFailure(bridge.stderr.text) }
            try await awaitStatus(socket, "the bridge's fleet connected") { $0.fleet?.state == "connected" }
            let a = try await FleetFollowerTests.follower(dir, ports: [nats.client], name: "a", upstream: "protocol = \"\(name)\"")
            let b = try await FleetFollowerTests.follower(dir, ports: [nats.client], name: "b", upstream: "protocol = \"\(name)\"")
            return Fleet(dir: dir, nats: nats, bridge: bridge, bridgeSocket: socket, a: a, b: b)
        }

        func stop() {
            self.a.daemon.stop()
            self.b.daemon.stop()
            self.bridge.stop()
            self.nats.process.stop()
        }
    }

    /// Apps on the bridge's host and on two followers, each with its own NATS sids (the same
    /// ones on every host): each gets its subjects' messages under its own sid and nothing else,
    /// one upstream subscription per subject whichever hosts hold it; an app that goes, and a
    /// follower killed with kill -9, let go of what only they held.
    @Test func appsOnThreeHostsKeepTheirOwnSidsAndShareOneUpstreamSubscriptionPerSubject() async throws {
        let upstreamDir = try TemporaryDirectory()
        let server = try await NATSServer.start(upstreamDir)
        defer { server.process.stop() }
        let fleet = try await Fleet.start(url: NATSProtocolTests.url(server), protocol: "nats")
        defer { fleet.stop() }
        let local = try await TextApp.connect(fleet.bridgeSocket, "local", of: fleet.bridge)
        let a1 = try await TextApp.connect(fleet.a.socket, "a1", of: fleet.a.daemon)
        let a2 = try await TextApp.connect(fleet.a.socket, "a2", of: fleet.a.daemon)
        let a3 = try await TextApp.connect(fleet.a.socket, "a3", of: fleet.a.daemon)
        let b1 = try await TextApp.connect(fleet.b.socket, "b1", of: fleet.b.daemon)
        let b2 = try await TextApp.connect(fleet.b.socket, "b2", of: fleet.b.daemon)
        let subscriptions: [(TextApp, String, String)] = [
            (local, "prices.btc", "1"), (a1, "prices.btc", "1"), (a2, "prices.eth", "1"), (a3, "prices.ada", "3"),
            (b1, "prices.eth", "1"), (b2, "prices.sol", "7"),
        ]
        for (i, (app, subject, sid)) in subscriptions.enumerated() {
            app.send("SUB \(subject) \(sid)\r\n", request: "s\(i)")
            let reply = await app.client.reply("s\(i)")
            #expect(reply?["ok"] == true, "\(subject): \(String(describing: reply))")
        }
        // One upstream subscription per subject, whatever hosts and sids hold it.
        try await eventually(
            "one upstream subscription per subject", { try server.subjects() }, until: { $0 == ["prices.ada", "prices.btc", "prices.eth", "prices.sol"] })
        let publisher = try await TextApp.connect(fleet.bridgeSocket, "publisher", of: fleet.bridge)
        for subject in ["btc", "eth", "ada", "sol"] { NATSProtocolTests.publish(publisher, "prices.\(subject)", #"{"n":1}"#, request: "p\(subject)") }
        for (app, subject, sid) in subscriptions {
            let got = await app.wait { $0.hasPrefix("MSG \(subject) ") }
            #expect(got == "MSG \(subject) \(sid) 7\r\n{\"n\":1}\r\n", "\(subject) at \(app.client.lines.name): \(String(describing: got))")
        }
        for (app, subject, _) in subscriptions {
            let others = app.texts().filter { $0.hasPrefix("MSG ") && !$0.hasPrefix("MSG \(subject) ") }
            #expect(others.isEmpty, "\(app.client.lines.name) got \(others)")
        }
        // Numbered in the stream's order on each follower: each app's lines in seq order.
        for app in [a1, a2, a3, b1, b2] {
            let seqs = app.client.lines.lines.compactMap { line -> Int? in
                guard line.contains(#""type":"message""#) else { return nil }
                return (try? JSONValue.parse(line))?["seq"]?.intValue
            }
            #expect(!seqs.isEmpty && seqs == seqs.sorted() && Set(seqs).count == seqs.count, "\(app.client.lines.name): \(seqs)")
        }

        // The bridge holds the five followers' apps.
        #expect(try daemonStatus(fleet.bridgeSocket).fleet?.followerApps == 5)
        // b2 goes: sol was only its.
        b2.close()
        try await eventually("prices.sol let go", { try server.subjects() }, until: { $0 == ["prices.ada", "prices.btc", "prices.eth"] })
        // Follower a dies: after the bridge stops hearing it, ada (only a3's) goes; btc (local's
        // too) and eth (b1's too) stay, and go on flowing.
        fleet.a.daemon.signal(SIGKILL)
        _ = await fleet.a.daemon.waitForExit()
        try await eventually("follower a's apps let go", { try server.subjects() }, until: { $0 == ["prices.btc", "prices.eth"] })
        let marks = (local.mark, b1.mark)
        NATSProtocolTests.publish(publisher, "prices.btc", #"{"n":2}"#, request: "q1")
        NATSProtocolTests.publish(publisher, "prices.eth", #"{"n":2}"#, request: "q2")
        #expect(await local.wait(from: marks.0) { $0 == "MSG prices.btc 1 7\r\n{\"n\":2}\r\n" } != nil)
        #expect(await b1.wait(from: marks.1) { $0 == "MSG prices.eth 1 7\r\n{\"n\":2}\r\n" } != nil)
    }

    /// A follower's app's sticky subscription and a follower's daemon-scope one are held by the
    /// bridge's layer: both come back after the upstream server's restart, under their sids; the
    /// app's goes with the app, the daemon-scope one with its follower.
    @Test func followersStickySubscriptionsOutliveServerRestartsAndGoWithTheirHolders() async throws {
        let upstreamDir = try TemporaryDirectory()
        var server = try await NATSServer.start(upstreamDir)
        defer { server.process.stop() }
        let fleet = try await Fleet.start(url: NATSProtocolTests.url(server), protocol: "nats")
        defer { fleet.stop() }
        let app = try await TextApp.connect(fleet.a.socket, "app", of: fleet.a.daemon)
        app.send("SUB prices.xrp 9\r\n", request: "x", sticky: "xrp")
        let held = await app.client.reply("x")
        #expect(held?["ok"] == true && held?["result"]?["status"] == "sent", "\(String(describing: held))")
        // On follower b: a daemon-scope one, from an app that goes at once; a plain subscriber.
        let watcher = try await TextApp.connect(fleet.b.socket, "watcher", of: fleet.b.daemon)
        let once = try await SocketClient.connected(to: fleet.b.socket, name: "once", daemon: fleet.b.daemon)
        once.send(#"{"id":"d","op":"send","text":"SUB prices.doge 4\r\n","sticky":"doge","scope":"daemon"}"#)
        #expect(await once.reply("d")?["ok"] == true)
        once.close()
        try await eventually("both held upstream", { try server.subjects() }, until: { $0 == ["prices.doge", "prices.xrp"] })

        let publisher = try await TextApp.connect(fleet.bridgeSocket, "publisher", of: fleet.bridge)
        await server.stop()
        let mark = publisher.mark
        server = try await NATSServer.start(upstreamDir, websocket: server.websocket, monitor: server.monitor)
        guard await publisher.client.lines.wait(from: mark, { $0.contains(#""type":"state""#) && $0.contains(#""state":"open""#) }) != nil else {
            throw TestFailure("the bridge's link did not open again: \(fleet.bridge.stderr.text.suffix(2000))")
        }
        try await eventually("both restored upstream", { try server.subjects() }, until: { $0 == ["prices.doge", "prices.xrp"] })
        NATSProtocolTests.publish(publisher, "prices.xrp", "1", request: "p1")
        NATSProtocolTests.publish(publisher, "prices.doge", "2", request: "p2")
        #expect(await app.wait { $0 == "MSG prices.xrp 9 1\r\n1\r\n" } != nil, "\(app.texts())")
        #expect(await watcher.wait { $0 == "MSG prices.doge 4 1\r\n2\r\n" } != nil, "\(watcher.texts())")
        #expect(!app.texts().contains { $0.contains("doge") })

        app.close()
        try await eventually("the app's went with it", { try server.subjects() }, until: { $0 == ["prices.doge"] })
        fleet.b.daemon.stop()
        _ = await fleet.b.daemon.waitForExit()
        try await eventually("follower b's went with it", { try server.subjects() }, until: { $0.isEmpty })
    }

    /// Two bridges with `protocol = "nats"`: the standby mirrors the follower's app's
    /// subscription (hot: on its own link, publishing nothing of it; cold: kept for its link's
    /// open), so when the leader is killed (`kill -9`) and it takes over, the app's messages go
    /// on under its sid, each once.
    @Test(arguments: ["hot", "cold"])
    func aStandbyHoldsTheFollowersSubscriptionsAndTakesOverWithThem(standby: String) async throws {
        let upstreamDir = try TemporaryDirectory()
        let server = try await NATSServer.start(upstreamDir)
        defer { server.process.stop() }
        let dir = try TemporaryDirectory()
        let nats = try await FleetTests.jetStream(dir)
        defer { nats.process.stop() }
        guard try FleetTests.js(nats, ["create-stream", "FEED", "feed.>"]).first?["name"] == "FEED" else { throw TestFailure("the stream was not made") }
        func bridge(_ name: String) async throws -> (ManagedProcess, String) {
            let socket = dir.file("\(name).sock")
            let config = try writeDaemonConfig(
                dir, name, url: NATSProtocolTests.url(server), socket: socket, upstream: "protocol = \"nats\"\ndedupe = [\"n\"]",
                extra: FleetFollowerTests.fleet([nats.client], role: "bridge") + "standby = \"\(standby)\"\nlease_ttl = \"2s\"\n")
            let daemon = try ManagedProcess.daemon(["--config", config], name: name)
            guard await daemon.awaitReady() else { throw TestFailure("\(name): \(daemon.stderr.text.suffix(2000))") }
            try await awaitStatus(socket, "\(name)'s fleet connected") { $0.fleet?.state == "connected" && $0.fleet?.lease != nil }
            return (daemon, socket)
        }
        let a = try await bridge("a")
        defer { a.0.stop() }
        try await awaitStatus(a.1, "a leads", timeout: .seconds(60)) { $0.fleet?.lease == "leading" }
        let b = try await bridge("b")
        defer { b.0.stop() }
        try await awaitStatus(b.1, "b stands by for a") { $0.fleet?.lease?.hasPrefix("standing by for ") == true }
        let (follower, socket) = try await FleetFollowerTests.follower(dir, ports: [nats.client], name: "f", upstream: "protocol = \"nats\"")
        defer { follower.stop() }
        let app = try await TextApp.connect(socket, "app", of: follower)
        app.send("SUB prices.btc 1\r\n", request: "s")
        #expect(await app.client.reply("s")?["ok"] == true)
        // Hot: both bridges hold it upstream, each on its own link; cold: the leader only.
        let both = standby == "hot" ? ["prices.btc", "prices.btc"] : ["prices.btc"]
        try await eventually("the bridges subscribed", { try server.subjects() }, until: { $0 == both })
        let first = try await TextApp.connect(a.1, "first", of: a.0)
        NATSProtocolTests.publish(first, "prices.btc", #"{"n":1}"#, request: "p1")
        #expect(await app.wait { $0 == "MSG prices.btc 1 7\r\n{\"n\":1}\r\n" } != nil, "\(app.texts())")

        a.0.signal(SIGKILL)
        _ = await a.0.waitForExit()
        try await awaitStatus(b.1, "b leads", timeout: .seconds(60)) { $0.fleet?.lease == "leading" && $0.state == .open }
        // Its link holds the app's subscription (a cold one's since its open).
        try await eventually("b alone subscribed", { try server.subjects() }, until: { $0 == ["prices.btc"] })
        let publisher = try await TextApp.connect(b.1, "publisher", of: b.0)
        NATSProtocolTests.publish(publisher, "prices.btc", #"{"n":2}"#, request: "p2")
        #expect(await app.wait { $0 == "MSG prices.btc 1 7\r\n{\"n\":2}\r\n" } != nil, "\(app.texts())")
        // Each once: the standby published none of it while a led.
        let texts = app.texts()
        #expect(texts.filter { $0.contains(#"{"n":1}"#) }.count == 1 && texts.filter { $0.contains(#"{"n":2}"#) }.count == 1, "\(texts)")
    }

    /// JSON-RPC apps on the bridge's host and on two followers call with the same id at once:
    /// each gets its own answer under its own id; a follower's `request` is answered by the
    /// message carrying its id; a follower's subscription gets its events under the server's id.
    @Test func jsonRPCAppsOnThreeHostsCallWithTheSameIdAndEachGetsItsOwnAnswer() async throws {
        let (peer, port) = try await JSONRPCProtocolTests.peer()
        defer { peer.stop() }
        let fleet = try await Fleet.start(url: "ws://127.0.0.1:\(port)/", protocol: "jsonrpc")
        defer { fleet.stop() }
        let apps = [
            try await JSONRPCProtocolTests.app(fleet.bridgeSocket, "local"),
            try await JSONRPCProtocolTests.app(fleet.a.socket, "a"),
            try await JSONRPCProtocolTests.app(fleet.b.socket, "b"),
        ]
        for round in 0..<3 {
            for (i, app) in apps.enumerated() {
                JSONRPCProtocolTests.call(app, #"{"jsonrpc":"2.0","id":1,"method":"add","params":[\#(1000 * (i + 1)),\#(round)]}"#, id: "c\(i)-\(round)")
            }
            for (i, app) in apps.enumerated() {
                let answer = await JSONRPCProtocolTests.waitFor(app) { $0["result"]?.intValue == 1000 * (i + 1) + round }
                #expect(answer?["id"] == 1, "\(app.lines.name) round \(round): \(String(describing: answer))")
            }
        }
        for (i, app) in apps.enumerated() {
            let foreign = JSONRPCProtocolTests.received(app).filter { ($0["result"]?.intValue).map { $0 / 1000 != i + 1 } ?? false }
            #expect(foreign.isEmpty, "\(app.lines.name) got another app's answers: \(foreign)")
        }
        // A follower's request, answered by its id, its reply numbered as the follower numbers.
        let follower = TextApp(client: apps[1])
        let reply = await follower.request(#"{"jsonrpc":"2.0","id":"r1","method":"add","params":[2,3]}"#, id: "req")
        #expect(reply?["ok"] == true && reply?["result"]?["json"]?["result"] == 5 && reply?["result"]?["json"]?["id"] == "r1", "\(String(describing: reply))")
        #expect((reply?["result"]?["seq"]?.intValue ?? 0) > 0)
        // A subscription of a follower's app: the server's id in its answer, its events under it.
        let b = apps[2]
        let mark = b.lines.count
        JSONRPCProtocolTests.call(b, #"{"jsonrpc":"2.0","id":7,"method":"eth_subscribe","params":["ticks"]}"#, id: "sub")
        let subscribed = await JSONRPCProtocolTests.waitFor(b, from: mark) { $0["id"] == 7 }
        let server = try #require(subscribed?["result"]?.stringValue, "\(String(describing: subscribed))")
        let event = await JSONRPCProtocolTests.waitFor(b, from: mark) { $0["method"] == "eth_subscription" }
        #expect(event?["params"]?["subscription"]?.stringValue == server, "\(String(describing: event))")
        // Another follower's app never sees it.
        let leaked = JSONRPCProtocolTests.received(apps[1]).contains { $0["method"] == "eth_subscription" }
        #expect(!leaked)
    }
    /// A follower's WebSocket face: a nats-py app there is an app of the bridge's protocol layer,
    /// as the follower's NDJSON apps are. Its request/reply goes through the bridge's connection
    /// (the reply routed back through the stream to it), and the subject it subscribes to reaches
    /// it under its own sid.
    @Test func aNATSAppOnAFollowersWebSocketFaceIsAnAppOfTheBridgesLayer() async throws {
        let upstreamDir = try TemporaryDirectory()
        let server = try await NATSServer.start(upstreamDir)
        defer { server.process.stop() }
        let fleet = try await Fleet.start(url: NATSProtocolTests.url(server), protocol: "nats")
        defer { fleet.stop() }
        let port = try freePort()
        let (follower, _) = try await FleetFollowerTests.follower(
            fleet.dir, ports: [fleet.nats.client], name: "c", upstream: "protocol = \"nats\"",
            local: "[local.websocket]\nlisten = \"127.0.0.1:\(port)\"")
        defer { follower.stop() }
        let app = try WebSocketFaceProtocolTests.app("nats_app.py", ["ws://127.0.0.1:\(port)", "c"], name: "nats-app")
        defer { app.stop() }
        _ = await app.stdout.wait(count: 3) { $0.hasPrefix("reply ") }
        #expect(
            app.stdout.lines.filter { $0.hasPrefix("reply ") } == (0..<3).map { "reply c served c-\($0)" },
            "\(app.stdout.text) \(follower.stderr.text.suffix(2000))")
        try await WebSocketFaceProtocolTests.publish(natsPort: server.client, ["feed.x": 5])
        _ = await app.stdout.wait(count: 5) { $0.hasPrefix("feed ") }
        #expect(app.stdout.lines.filter { $0.hasPrefix("feed ") } == (0..<5).map { "feed feed.x f\($0)" }, "\(app.stdout.text)")
        #expect(WebSocketFaceProtocolTests.noError(app))
    }
}
