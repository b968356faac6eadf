import Foundation
import Testing
import WSBridgeProtocol

/// Apps of an application protocol on the WebSocket face (docs/websocket.md): each written with
/// its protocol's own client library from PyPI, unmodified but for the URL, against the real
/// servers the protocol suites run. Each is one app of the protocol layer, as an NDJSON client
/// with `upstream.protocol` is: its ids rewritten, its subscriptions shared with the others',
/// restored after upstream restarts without it noticing.
@Suite(.serialized) struct WebSocketFaceProtocolTests {
    /// A daemon of `upstream.protocol = name` to `url`, its face on a free loopback port, once
    /// its link is open: it, its NDJSON socket and the face's URL.
    static func daemon(_ dir: TemporaryDirectory, url: String, protocol name: String, settings: String = "") async throws -> (ManagedProcess, String, String) {
        let port = try freePort()
        let socket = dir.file("d.sock")
        let config = try writeDaemonConfig(
            dir, "wsbridged", url: url, socket: socket, upstream: "protocol = \"\(name)\"",
            extra: "[local.websocket]\nlisten = \"127.0.0.1:\(port)\"\n" + (settings.isEmpty ? "" : "[protocol]\n\(settings)"))
        let daemon = try ManagedProcess.daemon(["--config", config, "--log-level", "debug"])
        guard await daemon.awaitLink(.open) else {
            daemon.stop()
            throw TestFailure("no open link: \(daemon.stderr.text)")
        }
        return (daemon, socket, "ws://127.0.0.1:\(port)")
    }

    /// An app of Tests/peers (`script`), in the apps' own venv.
    static func app(_ script: String, _ arguments: [String], name: String) throws -> ManagedProcess {
        try ManagedProcess(Paths.appsPython, ["-u", "\(Paths.root)/Tests/peers/\(script)"] + arguments, name: name)
    }

    /// Publishes to NATS at `natsPort` (a client of its own, nats-py): for each subject, that
    /// many messages, its first letter and their number (`f0`, `f1`… on feed.x, `j0`… on jobs).
    static func publish(natsPort: Int, _ counts: KeyValuePairs<String, Int>) async throws {
        let sends = counts.map { subject, n in "    for i in range(\(n)): await nc.publish(\"\(subject)\", b\"\(subject.prefix(1))%d\" % i)" }
        let code =
            ["import asyncio, nats", "async def main():", "    nc = await nats.connect(\"nats://127.0.0.1:\(natsPort)\")"] + sends + [
                "    await nc.flush(); await nc.close()", "asyncio.run(main())",
            ]
        let publisher = try ManagedProcess(Paths.appsPython, ["-c", code.joined(separator: "\n")], name: "publisher")
        guard await publisher.waitForExit() == 0 else { throw TestFailure("publishing to NATS failed: \(publisher.stderr.text)") }
    }

    /// An app printed no error (its library raised nothing).
    static func noError(_ app: ManagedProcess) -> Bool { !app.stdout.lines.contains { $0.hasPrefix("error ") } }

    /// The numbers of the lines `prefix N` an app printed, in order.
    static func numbers(_ app: ManagedProcess, _ prefix: String) -> [Int] {
        app.stdout.lines.compactMap { $0.hasPrefix(prefix) ? Int($0.dropFirst(prefix.count)) : nil }
    }

    /// gql (graphql-transport-ws over `websockets`): three apps, all on gql's ids ("1" for the
    /// subscription, "2" for the query), two on the same subscription: one upstream subscription
    /// for the two, each app its own events and its own query's answer; five server restarts,
    /// and the apps' subscriptions go on with nothing raised in them.
    @Test func gqlAppsShareASubscriptionAndSeeNoneOfFiveServerRestarts() async throws {
        let dir = try TemporaryDirectory()
        var (peer, port) = try await GraphQLProtocolTests.peer()
        defer { peer.stop() }
        let (daemon, socket, url) = try await Self.daemon(dir, url: "ws://127.0.0.1:\(port)/graphql", protocol: "graphql-transport-ws")
        defer { daemon.stop() }
        let apps = try [("a", "alpha"), ("b", "beta"), ("c", "alpha")].map { name, feed in
            (try Self.app("gql_app.py", ["\(url)/", feed], name: name), feed)
        }
        defer { for (app, _) in apps { app.stop() } }
        for (app, feed) in apps {
            #expect(await app.stdout.wait(containing: "answer 5") != nil, "\(app.stdout.text) \(app.stderr.text)")
            #expect(await app.stdout.wait(containing: "event \(feed) ") != nil)
            #expect(!app.stdout.lines.contains { $0.hasPrefix("event ") && !$0.hasPrefix("event \(feed) ") }, "\(app.stdout.lines.prefix(5))")
        }
        // Two subscriptions upstream for three apps, on one connection.
        #expect(peer.stdout.lines.filter { $0.hasPrefix("subscribe ") }.sorted() == ["subscribe alpha", "subscribe beta"], "\(peer.stdout.text)")
        // `clients` lists them beside the NDJSON client asking: their face, user agent, protocol
        // and the subscription each holds.
        let control = try await JSONRPCProtocolTests.app(socket, "control")
        control.send(#"{"id":"c","op":"clients"}"#)
        let listed = await control.reply("c")?.value(at: "result.clients")
        guard case .array(let clients)? = listed else { throw TestFailure("no clients: \(String(describing: listed))") }
        let listedApps = clients.filter { $0["face"] == "websocket" }
        #expect(listedApps.count == 3 && listedApps.allSatisfy { $0["protocol"] == "graphql-transport-ws" && $0["subscriptions"] == 1 }, "\(clients)")
        #expect(listedApps.allSatisfy { $0["user_agent"]?.stringValue?.isEmpty == false && $0["uid"] == 0 }, "\(listedApps)")
        #expect(clients.filter { $0["face"] == nil }.map { $0["subscriptions"] } == [0], "\(clients)")
        // An NDJSON app on the same id, sending the same operation as gql does, shares the
        // WebSocket apps' upstream subscription.
        let operation: JSONValue = [
            "type": "subscribe", "id": "1",
            "payload": ["query": "subscription ($name: String!) { ticks(name: $name) { name n } }", "variables": ["name": "alpha"]],
        ]
        GraphQLProtocolTests.send(control, operation, request: "s")
        let next = await JSONRPCProtocolTests.waitFor(control) { $0["type"] == "next" }
        #expect(next?["id"] == "1" && next?.value(at: "payload.data.ticks.name") == "alpha", "\(String(describing: next))")
        control.send(#"{"id":"st","op":"status"}"#)
        let keys = await control.reply("st")?.value(at: "result.protocol.subscriptions")
        #expect(peer.stdout.lines.filter { $0.hasPrefix("subscribe ") }.count == 2, "\(peer.stdout.text) \(String(describing: keys))")
        control.close()
        for restart in 1...5 {
            peer.stop()
            _ = await peer.waitForExit()
            let marks = apps.map { $0.0.stdout.lines.count }
            (peer, _) = try await GraphQLProtocolTests.peer(port: port)
            for (i, (app, feed)) in apps.enumerated() {
                // The subscription flows again: its events restart at 1 on the new connection.
                #expect(await app.stdout.wait(from: marks[i]) { $0 == "event \(feed) 1" } != nil, "restart \(restart): \(app.stdout.lines.suffix(3))")
            }
        }
        for (app, feed) in apps {
            // And on: the last connection's events keep coming.
            #expect(await app.stdout.wait(from: app.stdout.lines.count) { $0.hasPrefix("event \(feed) ") } != nil)
            let numbers = Self.numbers(app, "event \(feed) ")
            let (lost, duplicated) = lostAndDuplicated(numbers)
            print("face gql 5 restarts: \(feed): \(numbers.count) events, \(lost) lost, \(duplicated) twice within connections")
            #expect(lost == 0 && duplicated == 0 && Self.noError(app), "\(app.stdout.text.suffix(500))")
            #expect(app.stdout.lines.filter { $0.hasPrefix("answer ") } == ["answer 5"])
        }
    }

    /// web3.py (AsyncWeb3 over its WebSocketProvider): three apps subscribe to newHeads on web3's
    /// ids (one subscription upstream), each asks eth_chainId and sends a batch of 10 calls,
    /// answered as one array in order; after a server restart their subscription goes on under
    /// the id they were given.
    @Test func web3AppsShareNewHeadsGetTheirBatchesInOrderAndKeepTheirSubscriptionAcrossARestart() async throws {
        let dir = try TemporaryDirectory()
        var (peer, port) = try await pythonPeer("jsonrpc_peer.py", port: 0, ["--interval", "0.05"])
        defer { peer.stop() }
        let (daemon, _, url) = try await Self.daemon(dir, url: "ws://127.0.0.1:\(port)/", protocol: "jsonrpc")
        defer { daemon.stop() }
        let apps = try ["a", "b", "c"].map { try Self.app("web3_app.py", ["\(url)/"], name: $0) }
        defer { for app in apps { app.stop() } }
        var given: [String] = []
        for app in apps {
            let subscribed = await app.stdout.wait { $0.hasPrefix("subscribed ") }
            given.append(String(subscribed?.dropFirst(11) ?? ""))
            #expect(await app.stdout.wait(containing: "chain 1337") != nil, "\(app.stdout.text) \(app.stderr.text)")
            #expect(await app.stdout.wait { $0.hasPrefix("batch ") } == "batch 1 2 3 4 5 6 7 8 9 10", "\(app.stdout.text)")
            #expect(await app.stdout.wait { $0.hasPrefix("head ") } != nil)
        }
        // One subscription upstream; every app was given its id, and the batches went as calls.
        #expect(peer.stdout.lines.filter { $0.hasPrefix("subscribe ") }.count == 1, "\(peer.stdout.text)")
        #expect(Set(given).count == 1 && !given[0].isEmpty, "\(given)")
        #expect(peer.stdout.lines.filter { $0.hasPrefix("call eth_getBalance ") }.count == 30)

        let id = given[0]
        peer.stop()
        _ = await peer.waitForExit()
        let marks = apps.map { $0.stdout.lines.count }
        (peer, _) = try await pythonPeer("jsonrpc_peer.py", port: port, ["--interval", "0.05"])
        for (i, app) in apps.enumerated() {
            // Heads again, numbered from 1 by the new connection, under the id the app was given.
            #expect(await app.stdout.wait(from: marks[i]) { $0 == "head \(id) 1" } != nil, "\(app.stdout.lines.suffix(3))")
            #expect(Self.noError(app), "\(app.stdout.text.suffix(400))")
        }
        #expect(peer.stdout.lines.filter { $0.hasPrefix("subscribe ") }.count == 1)
    }

    /// A JSON-RPC batch on the NDJSON face: one `send` of an array of calls, each id rewritten (a
    /// second app sends the same ids at once), the answers as one message, an array in the
    /// order of the calls; an item that is no request answered in its place, a notification not.
    @Test func aJSONRPCBatchOnTheNDJSONSocketIsAnsweredAsOneArrayInOrder() async throws {
        let dir = try TemporaryDirectory()
        let (peer, port) = try await pythonPeer("jsonrpc_peer.py", port: 0)
        defer { peer.stop() }
        let (daemon, socket) = try await protocolDaemon(dir, url: "ws://127.0.0.1:\(port)/", protocol: "jsonrpc")
        defer { daemon.stop() }
        let apps = [try await JSONRPCProtocolTests.app(socket, "a"), try await JSONRPCProtocolTests.app(socket, "b")]
        for (app, base) in zip(apps, [10, 20]) {
            let batch: JSONValue = [
                ["jsonrpc": "2.0", "id": 1, "method": "slow", "params": [0.2]],
                ["jsonrpc": "2.0", "id": 2, "method": "add", "params": [.number(JSONNumber(base)), 1]],
                ["jsonrpc": "2.0", "method": "add", "params": [0, 0]], 5,
            ]
            app.send((["id": "b", "op": "send", "text": .string(batch.serialized)] as JSONValue).serialized)
        }
        for (app, base) in zip(apps, [10, 20]) {
            guard let answers = await JSONRPCProtocolTests.waitFor(app, { if case .array = $0 { true } else { false } }), case .array(let items) = answers
            else {
                Issue.record("no batch answer: \(app.lines.text)")
                continue
            }
            #expect(items.count == 3 && items[0]["id"] == 1 && items[0]["result"] == "slow done", "\(answers)")
            #expect(items[1]["id"] == 2 && items[1]["result"] == .number(JSONNumber(base + 1)), "\(answers)")
            #expect(items[2]["id"] == .null && items[2].value(at: "error.code") == -32600, "\(answers)")
            #expect(JSONRPCProtocolTests.received(app).count == 1, "one message: \(JSONRPCProtocolTests.received(app))")
        }
        // Each app's calls went upstream one by one (the peer logs the calls with an id).
        #expect(peer.stdout.lines.filter { $0.hasPrefix("call add") }.count == 2 && peer.stdout.lines.filter { $0.hasPrefix("call slow") }.count == 2)
    }

    /// STOMP against RabbitMQ's Web STOMP: two apps (frames as stomp.js writes them, through a
    /// stock `websockets` client offering `v12.stomp`) each `CONNECT` and are answered `CONNECTED`
    /// by the face (heart-beat 0,0: the daemon keeps the broker's), both `SUBSCRIBE` as `sub-0`
    /// to one destination (one consumer at the broker), and a `SEND` with a receipt is answered
    /// to its app while its `MESSAGE` reaches both under their own id.
    @Test func stompAppsShareADestinationAndGetTheirOwnReceipts() async throws {
        let dir = try TemporaryDirectory()
        let node = try await RabbitMQNode.start(dir)
        defer { node.stopNow() }
        let (daemon, _, url) = try await Self.daemon(dir, url: STOMPProtocolTests.url(node), protocol: "stomp", settings: STOMPProtocolTests.settings)
        defer { daemon.stop() }
        let apps = try ["a", "b"].map { name in
            try ManagedProcess(Paths.python, ["-u", "\(Paths.root)/Tests/peers/ws_app.py", "\(url)/", "--subprotocol", "v12.stomp", "--quote"], name: name)
        }
        defer { for app in apps { app.stop() } }
        func frame(_ text: String) -> String { "sendjson " + JSONValue.string(text).serialized }
        func frames(_ app: ManagedProcess, _ command: String, from: Int = 0) async -> String? {
            guard let line = await app.stdout.wait(from: from, { $0.hasPrefix("message \"\(command)") }) else { return nil }
            return (try? JSONValue.parse(String(line.dropFirst(8))))?.stringValue
        }
        for app in apps {
            #expect(await app.stdout.wait(containing: "subprotocol v12.stomp") != nil, "\(app.stdout.text) \(app.stderr.text)")
            app.send(frame("CONNECT\naccept-version:1.2\nhost:/\nheart-beat:10000,10000\n\n\0"))
            let connected = await frames(app, "CONNECTED")
            #expect(connected?.contains("heart-beat:0,0") == true, "\(String(describing: connected)) \(app.stdout.text)")
            app.send(frame(STOMPProtocolTests.subscribe("sub-0", "/topic/prices")))
        }
        // The broker has the one consumer, the daemon's, before the SEND goes.
        try await eventually("one consumer at the broker", timeout: .seconds(30), { try node.consumerList().count }, until: { $0 == 1 })
        let marks = apps.map { $0.stdout.lines.count }
        apps[0].send(frame("SEND\ndestination:/topic/prices\nreceipt:r-1\ncontent-type:application/json\n\n{\"p\":1}\0"))
        let receipt = await frames(apps[0], "RECEIPT", from: marks[0])
        #expect(receipt?.contains("receipt-id:r-1") == true, "\(String(describing: receipt))")
        for (i, app) in apps.enumerated() {
            let message = await frames(app, "MESSAGE", from: marks[i])
            #expect(message?.contains("subscription:sub-0") == true && message?.contains("{\"p\":1}") == true, "\(String(describing: message))")
        }
        #expect(!apps[1].stdout.lines.contains { $0.contains("RECEIPT") }, "the receipt is a's only")
    }

    /// python-socketio's AsyncClient on the websocket transport: each app its own Engine.IO
    /// session (the face's open packet and pings), its emits' acks answered to it only though all
    /// three use the same ack ids; a room one app joined is the connection's, so its events
    /// reach every app (docs/websocket.md says so).
    @Test func socketIOAppsGetTheirOwnAcksAndTheRoomsEventsReachEveryApp() async throws {
        let dir = try TemporaryDirectory()
        let (peer, port) = try await pythonPeer("socketio_peer.py", port: 0, ["--interval", "0.05"])
        defer { peer.stop() }
        let (daemon, _, url) = try await Self.daemon(dir, url: "ws://127.0.0.1:\(port)/socket.io/?EIO=4&transport=websocket", protocol: "socketio")
        defer { daemon.stop() }
        let apps = try ["a", "b", "c"].map { name in try Self.app("socketio_app.py", [url, name] + (name == "a" ? ["--join", "lobby"] : []), name: name) }
        defer { for app in apps { app.stop() } }
        var sids: Set<String> = []
        for (app, base) in zip(apps, [1000, 2000, 3000]) {
            let open = await app.stdout.wait { $0.hasPrefix("open ") }
            sids.insert(String(open?.dropFirst(5) ?? ""))
            _ = await app.stdout.wait(count: 5) { $0.hasPrefix("answer ") }
            #expect(Self.numbers(app, "answer ") == (0..<5).map { base + $0 }, "\(app.stdout.text) \(app.stderr.text)")
            #expect(await app.stdout.wait { $0.hasPrefix("tick lobby ") } != nil, "\(app.stdout.text)")
        }
        #expect(sids.count == 3, "each app its own session: \(sids)")
        // One Socket.IO client upstream, in the room once.
        #expect(peer.stdout.lines.filter { $0.hasPrefix("connected ") }.count == 1 && peer.stdout.lines.contains("members lobby 1"))
        for app in apps {
            let ticks = Self.numbers(app, "tick lobby ")
            #expect(ticks == Array((ticks.first ?? 0)...(ticks.last ?? 0)) && Self.noError(app), "\(ticks.prefix(5))")
        }
    }

    /// nats-py over ws://: two apps on the same sids (nats-py numbers from 1) share `feed.>`,
    /// each serves its own request subject and asks it (request/reply through the daemon's inbox),
    /// and both join queue group `workers`, whose messages they share in turn, as two members'.
    @Test func natsAppsShareSidsRequestReplyAndAQueueGroup() async throws {
        let dir = try TemporaryDirectory()
        let server = try await NATSServer.start(dir)
        defer { Task { await server.stop() } }
        let (daemon, _, url) = try await Self.daemon(dir, url: NATSProtocolTests.url(server), protocol: "nats")
        defer { daemon.stop() }
        let apps = try ["a", "b"].map { try Self.app("nats_app.py", [url, $0], name: $0) }
        defer { for app in apps { app.stop() } }
        for (app, name) in zip(apps, ["a", "b"]) {
            _ = await app.stdout.wait(count: 3) { $0.hasPrefix("reply ") }
            #expect(app.stdout.lines.filter { $0.hasPrefix("reply ") } == (0..<3).map { "reply \(name) served \(name)-\($0)" }, "\(app.stdout.text)")
        }
        try await Self.publish(natsPort: server.client, ["feed.x": 5, "jobs": 10])
        for app in apps {
            _ = await app.stdout.wait(count: 5) { $0.hasPrefix("feed ") }
            #expect(app.stdout.lines.filter { $0.hasPrefix("feed ") } == (0..<5).map { "feed feed.x f\($0)" }, "\(app.stdout.text)")
        }
        // The queue group's 10 messages: each to one app, in turn (5 each, none twice).
        var jobs: [String] = []
        for app in apps { jobs += await app.stdout.wait(count: 5) { $0.hasPrefix("job ") } }
        #expect(jobs.sorted() == (0..<10).map { "job j\($0)" }.sorted(), "\(jobs)")
        #expect(apps.allSatisfy(Self.noError))
    }
}
