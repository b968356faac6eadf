import Foundation
import Testing
import WSBridgeCore
import WSBridgeProtocol

/// A pool with `upstream.protocol` against a real server's per-connection cap: Debian's
/// nats-server with `max_subscriptions = 21` (20 of the apps' and the daemon's inbox) refuses
/// the 22nd SUB on a connection with `-ERR 'maximum subscriptions exceeded'`. Each connection of
/// the pool has its protocol layer: its own sids on the wire, its own handshake; apps see one
/// feed with their own sids.
@Suite(.serialized) struct ProtocolPoolTests {
    static let cap = "max_subscriptions: 21"

    /// A daemon on `server` with `upstream.protocol = "nats"`, `pool`: 20 subscriptions per
    /// connection; `upstream`: more keys of [upstream].
    static func daemon(_ dir: TemporaryDirectory, _ server: NATSServer, pool: Bool, upstream: String = "") async throws -> (ManagedProcess, String) {
        let socket = dir.file("d.sock")
        let config = try writeDaemonConfig(
            dir, "wsbridged", url: NATSProtocolTests.url(server), socket: socket,
            upstream: "protocol = \"nats\"\n" + (pool ? "subscriptions_per_connection = 20\nconnections = 3\n" : "") + upstream,
            // A new connection's subscriptions go one at a time, each once the one before it
            // delivered or this passed (a NATS SUB is not answered: here nothing is published yet).
            extra: "[protocol]\nconfirm_timeout = \"100ms\"")
        let daemon = try ManagedProcess.daemon(["--config", config, "--log-level", "debug"])
        guard await daemon.awaitLink(.open) else {
            daemon.stop()
            throw TestFailure("no open link: \(daemon.stderr.text)")
        }
        return (daemon, socket)
    }

    /// Subscribes `app` to `subjects`, sids 1, 2, … in its own numbering.
    static func subscribe(_ app: TextApp, _ subjects: [String], name: String) async -> Bool {
        let text = subjects.enumerated().map { "SUB \($1) \($0 + 1)\r\n" }.joined()
        app.send(text, request: name)
        return await app.client.reply(name)?["ok"] == true
    }

    /// The subjects the server holds on each of its connections (the daemon's inbox left out).
    static func subjectsPerConnection(_ server: NATSServer) throws -> [[String]] {
        let r = try spawnAndWait("/usr/bin/curl", ["-sf", "http://127.0.0.1:\(server.monitor)/connz?subs=1"])
        guard let connz = try? JSONValue.parse(r.stdout), case .array(let connections)? = connz["connections"] else { return [] }
        return connections.map { c in
            guard case .array(let subs)? = c["subscriptions_list"] else { return [] }
            return subs.compactMap(\.stringValue).filter { !$0.hasPrefix("_INBOX.wsbridged-") }.sorted()
        }
    }

    /// Without a pool, the server's cap shows: of 40 subjects, the 20 past it never flow.
    @Test func withoutAPoolTheServersCapLeavesSubjectsSilent() async throws {
        let dir = try TemporaryDirectory()
        let server = try await NATSServer.start(dir, extra: Self.cap)
        defer { server.process.stop() }
        let (daemon, socket) = try await Self.daemon(dir, server, pool: false)
        defer { daemon.stop() }
        let a = try await TextApp.connect(socket, "a", of: daemon)
        #expect(await Self.subscribe(a, (0..<40).map { "s.\($0)" }, name: "sa"))
        try await eventually(
            "the server's refusal in status", { await a.status() },
            until: {
                $0?.value(at: "result.protocol.server_error")?.stringValue?.contains("maximum subscriptions exceeded") == true
            })
        #expect(try Self.subjectsPerConnection(server).map(\.count) == [20])
    }

    /// 40 subjects at 20 per connection: 2 connections, every subject flowing to its app with the
    /// app's own sid (two apps using the same sids, a subject shared); a request answered across
    /// connections (asked on the first, its responder's subscription on the second); the second
    /// app leaving: back to one connection.
    @Test func fortySubjectsAtTwentyPerConnectionFlowOnTwoConnections() async throws {
        let dir = try TemporaryDirectory()
        let server = try await NATSServer.start(dir, extra: Self.cap)
        defer { server.process.stop() }
        let (daemon, socket) = try await Self.daemon(dir, server, pool: true)
        defer { daemon.stop() }
        let a = try await TextApp.connect(socket, "a", of: daemon)
        let b = try await TextApp.connect(socket, "b", of: daemon)
        let p = try await TextApp.connect(socket, "publisher", of: daemon)
        #expect(await Self.subscribe(a, (0..<20).map { "s.\($0)" }, name: "sa"))
        // b: s.0 (a's too: held once, on a's connection) and 19 more; its sids are 1…20 as a's are.
        #expect(await Self.subscribe(b, ["s.0"] + (20..<39).map { "s.\($0)" }, name: "sb"))
        let perConnection = try await eventually(
            "two connections, 20 and 19 subjects", { try Self.subjectsPerConnection(server) },
            until: { $0.map(\.count).sorted() == [19, 20] })
        #expect(Set(perConnection.joined()).count == 39, "\(perConnection)")

        // Every subject flows to its holders, with their own sids.
        for n in 0..<39 { NATSProtocolTests.publish(p, "s.\(n)", "\(n)", request: "p\(n)") }
        for n in 0..<20 {
            #expect(await a.wait { $0 == "MSG s.\(n) \(n + 1) \("\(n)".utf8.count)\r\n\(n)\r\n" } != nil, "a, s.\(n): \(a.texts().suffix(5))")
        }
        #expect(await b.wait { $0 == "MSG s.0 1 1\r\n0\r\n" } != nil, "\(b.texts().suffix(5))")
        for n in 20..<39 {
            #expect(await b.wait { $0 == "MSG s.\(n) \(n - 18) 2\r\n\(n)\r\n" } != nil, "b, s.\(n): \(b.texts().suffix(5))")
        }
        let status = await a.status()
        #expect(status?.value(at: "result.protocol.server_error") == nil, "\(String(describing: status))")
        guard case .array(let connections)? = status?.value(at: "result.connections") else {
            throw TestFailure("no connections in status: \(String(describing: status))")
        }
        #expect(connections.compactMap { $0["subscriptions"]?.intValue }.sorted() == [19, 20], "\(connections)")
        // Each connection's WebSocket messages, labelled (the server puts several MSGs in one): both carried some.
        a.client.send(#"{"id":"m","op":"metrics"}"#)
        let metrics = await a.client.reply("m")?.value(at: "result.text")?.stringValue ?? ""
        for connection in 1...2 {
            let line = metrics.split(separator: "\n").first { $0.hasPrefix("wsbridge_connection_messages_received_total{connection=\"\(connection)\"} ") }
            #expect((line?.split(separator: " ").last.flatMap { Double($0) } ?? 0) >= 1, "\(String(describing: line))")
        }

        // A request asked on the first connection, answered by a responder whose subscription
        // is on the second (the first is full): the answer finds its app, once.
        let responder = try await TextApp.connect(socket, "responder", of: daemon)
        #expect(await Self.subscribe(responder, ["svc.add"], name: "sr"))
        let q = try await TextApp.connect(socket, "q", of: daemon)
        async let answer = q.request("PUB svc.add rep 5\r\n[1,2]\r\n", id: "r1")
        guard let asked = await responder.wait({ $0.hasPrefix("MSG svc.add 1 _INBOX.wsbridged-") }),
            let inbox = asked.split(separator: "\r\n").first?.split(separator: " ").dropFirst(3).first
        else { throw TestFailure("the responder was not asked: \(responder.texts())") }
        responder.send("PUB \(inbox) 1\r\n3\r\n", request: "answer")
        let reply = await answer
        #expect(reply?.value(at: "result.json.payload") == "3" && reply?.value(at: "result.json.subject") == "rep", "\(String(describing: reply))")

        // b and the responder leave: the second connection has nothing left and closes.
        b.close()
        responder.close()
        let left = try await eventually("one connection, a's 20 subjects", { try Self.subjectsPerConnection(server) }, until: { $0.count == 1 })
        #expect(left == [(0..<20).map { "s.\($0)" }.sorted()])
        try await eventually(
            "status to list one connection", { await a.status() },
            until: {
                if case .array(let c)? = $0?.value(at: "result.connections") { c.count == 1 } else { false }
            })
        // a's subjects flow on.
        let mark = a.mark
        NATSProtocolTests.publish(p, "s.7", "after", request: "after")
        #expect(await a.wait(from: mark) { $0 == "MSG s.7 8 5\r\nafter\r\n" } != nil)
    }

    /// graphql-transport-ws against strawberry (which closes a connection with 4409 when an id is
    /// used twice on it) at 2 subscriptions per connection: three apps, two on the same ids, a
    /// subscription two of them share; each connection has its own ids, so no 4409; each app gets
    /// its own events under its own ids; a query is answered to its app; a `complete` reaches the
    /// connection its subscription is on; the second connection closes once its subscriptions end.
    @Test func graphqlAppsOnTheSameIdsOverTwoConnections() async throws {
        let dir = try TemporaryDirectory()
        let (peer, port) = try await GraphQLProtocolTests.peer()
        defer { peer.stop() }
        let socket = dir.file("d.sock")
        let config = try writeDaemonConfig(
            dir, "wsbridged", url: "ws://127.0.0.1:\(port)/graphql", socket: socket,
            upstream: "protocol = \"graphql-transport-ws\"\nsubscriptions_per_connection = 2\nconnections = 2")
        let daemon = try ManagedProcess.daemon(["--config", config, "--log-level", "debug"])
        defer { daemon.stop() }
        guard await daemon.awaitLink(.open) else { throw TestFailure("no open link: \(daemon.stderr.text)") }
        let a = try await JSONRPCProtocolTests.app(socket, "a")
        let b = try await JSONRPCProtocolTests.app(socket, "b")
        let c = try await JSONRPCProtocolTests.app(socket, "c")
        let wanted = [(a, "1", "alpha"), (a, "2", "beta"), (b, "1", "gamma"), (b, "2", "alpha"), (c, "1", "delta")]
        for (n, (app, id, name)) in wanted.enumerated() { GraphQLProtocolTests.subscribe(app, id: id, name: name, request: "s\(n)") }
        for (app, id, name) in wanted {
            let next = await JSONRPCProtocolTests.waitFor(app) { $0["type"] == "next" && $0["id"]?.stringValue == id }
            #expect(next?.value(at: "payload.data.ticks.name")?.stringValue == name, "\(id) \(name): \(String(describing: next))")
        }
        // Four subscriptions upstream (alpha shared), on two connections; never a 4409.
        #expect(
            peer.stdout.lines.filter { $0.hasPrefix("subscribe ") }.sorted() == ["subscribe alpha", "subscribe beta", "subscribe delta", "subscribe gamma"])
        #expect(!daemon.stderr.text.contains("4409"))
        a.send(#"{"id":"st","op":"status"}"#)
        let status = await a.reply("st")
        guard case .array(let connections)? = status?.value(at: "result.connections"),
            case .array(let subscriptions)? = status?.value(at: "result.protocol.subscriptions")
        else { throw TestFailure("no connections in status: \(String(describing: status))") }
        #expect(connections.compactMap { $0["subscriptions"]?.intValue } == [2, 2], "\(connections)")
        let on = Dictionary(subscriptions.compactMap { s in s["key"]?.stringValue.map { ($0, s["connection"]?.intValue ?? 0) } }) { x, _ in x }
        #expect(Set(on.values) == [1, 2] && on.count == 4, "\(subscriptions)")

        // A query: answered to its app, on whichever connection it went.
        GraphQLProtocolTests.send(c, ["type": "subscribe", "id": "q", "payload": ["query": "{ add(a: 2, b: 3) }"]], request: "q")
        #expect(await JSONRPCProtocolTests.waitFor(c) { $0["id"] == "q" && $0["type"] == "next" }?.value(at: "payload.data.add") == 5)
        #expect(!JSONRPCProtocolTests.received(a).contains { $0["id"] == "q" } && !JSONRPCProtocolTests.received(b).contains { $0["id"] == "q" })

        // b completes its id 1 (gamma, on the second connection): it ends there.
        GraphQLProtocolTests.send(b, ["type": "complete", "id": "1"], request: "end")
        #expect(await peer.stdout.wait(timeout: .seconds(20)) { $0 == "unsubscribe gamma" } != nil, "\(peer.stdout.text)")
        // c leaves: delta ends, the second connection has nothing left and closes.
        c.close()
        #expect(await peer.stdout.wait(timeout: .seconds(20)) { $0 == "unsubscribe delta" } != nil, "\(peer.stdout.text)")
        try await awaitStatus(socket, "status to list one connection") { $0.connections?.count == 1 }
        // a's two and b's alpha flow on.
        let mark = b.lines.count
        #expect(await JSONRPCProtocolTests.waitFor(b, from: mark) { $0["type"] == "next" && $0["id"] == "2" } != nil)
    }
}
