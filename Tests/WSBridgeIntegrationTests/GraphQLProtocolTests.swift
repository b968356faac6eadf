import Foundation
import Testing
import WSBridgeProtocol

/// `upstream.protocol = "graphql-transport-ws"` against strawberry-graphql under uvicorn
/// (Tests/peers/graphql_peer.py), which closes a connection with 4409 when one subscription id
/// is used twice on it: three apps, two of them on the same ids (issue 33).
@Suite(.serialized) struct GraphQLProtocolTests {
    static func peer(port: Int = 0) async throws -> (ManagedProcess, Int) {
        try await pythonPeer("graphql_peer.py", port: port)
    }

    /// `send` of one graphql-transport-ws message, as an app's client library would write it.
    static func send(_ c: SocketClient, _ message: JSONValue, request: String) {
        let line: JSONValue = ["id": .string(request), "op": "send", "text": .string(message.serialized)]
        c.send(line.serialized)
    }

    static func daemon(_ dir: TemporaryDirectory, port: Int, settings: String) async throws -> (ManagedProcess, String) {
        try await protocolDaemon(dir, url: "ws://127.0.0.1:\(port)/graphql", protocol: "graphql-transport-ws", settings: settings)
    }

    static func subscribe(_ c: SocketClient, id: String, name: String, request: String) {
        let query = "subscription { ticks(name: \"\(name)\") { name n } }"
        Self.send(c, ["type": "subscribe", "id": .string(id), "payload": ["query": .string(query)]], request: request)
    }

    @Test func appsOnTheSameIdsEachGetTheirOwnSubscriptionAcrossServerRestarts() async throws {
        let dir = try TemporaryDirectory()
        var (peer, port) = try await Self.peer()
        defer { peer.stop() }
        let (daemon, socket) = try await Self.daemon(dir, port: port, settings: "init_payload = '{\"app\":\"wsbridged\"}'")
        defer { daemon.stop() }
        let a = try await JSONRPCProtocolTests.app(socket, "a")
        let b = try await JSONRPCProtocolTests.app(socket, "b")
        let c = try await JSONRPCProtocolTests.app(socket, "c")
        // An app's own handshake (its client library's habit) is answered by the daemon.
        a.send(#"{"id":"init","op":"send","text":"{\"type\":\"connection_init\"}"}"#)
        #expect(await a.reply("init")?.value(at: "result.status") == "answered")
        #expect(await JSONRPCProtocolTests.waitFor(a) { $0["type"] == "connection_ack" } != nil)

        Self.subscribe(a, id: "1", name: "alpha", request: "sa")
        Self.subscribe(b, id: "1", name: "beta", request: "sb")
        Self.subscribe(c, id: "9", name: "alpha", request: "sc")
        for (app, id, name) in [(a, "1", "alpha"), (b, "1", "beta"), (c, "9", "alpha")] {
            let next = await JSONRPCProtocolTests.waitFor(app) { $0["type"] == "next" }
            #expect(next?["id"]?.stringValue == id && next?.value(at: "payload.data.ticks.name")?.stringValue == name, "\(String(describing: next))")
        }
        // Two subscriptions upstream for three apps; no 4409, no reconnect.
        #expect(peer.stdout.lines.filter { $0.hasPrefix("subscribe ") }.sorted() == ["subscribe alpha", "subscribe beta"])
        #expect(!daemon.stderr.text.contains("4409"))
        #expect(!JSONRPCProtocolTests.received(b).contains { $0.value(at: "payload.data.ticks.name")?.stringValue == "alpha" })

        // A query is one call: its answer and its end, to its app only.
        Self.send(a, ["type": "subscribe", "id": "q", "payload": ["query": "{ add(a: 2, b: 3) }"]], request: "q")
        #expect(await JSONRPCProtocolTests.waitFor(a) { $0["id"] == "q" && $0["type"] == "next" }?.value(at: "payload.data.add") == 5)
        #expect(await JSONRPCProtocolTests.waitFor(a) { $0["id"] == "q" && $0["type"] == "complete" } != nil)

        // The server restarts twice: every subscription flows again, the apps' ids unchanged.
        for restart in 1...20 {
            peer.stop()
            _ = await peer.waitForExit()
            let marks = [a.lines.count, b.lines.count, c.lines.count]
            (peer, _) = try await Self.peer(port: port)
            for (i, (app, id, name)) in [(a, "1", "alpha"), (b, "1", "beta"), (c, "9", "alpha")].enumerated() {
                let next = await JSONRPCProtocolTests.waitFor(app, from: marks[i]) { $0["type"] == "next" }
                #expect(next?["id"]?.stringValue == id && next?.value(at: "payload.data.ticks.name")?.stringValue == name, "restart \(restart)")
            }
        }

        for (name, app) in [("a", a), ("b", b), ("c", c)] {
            let numbers = JSONRPCProtocolTests.received(app).compactMap { $0.value(at: "payload.data.ticks.n")?.intValue }
            let (lost, duplicated) = lostAndDuplicated(numbers)
            print("graphql 20 restarts: \(name): \(numbers.count) events, \(lost) lost, \(duplicated) duplicated within connections")
            #expect(lost == 0 && duplicated == 0)
        }

        // Holders leave: "alpha" ends upstream with its last holder only.
        a.close()
        let mark = c.lines.count
        #expect(await JSONRPCProtocolTests.waitFor(c, from: mark) { $0["type"] == "next" } != nil)
        #expect(!peer.stdout.lines.contains("unsubscribe alpha"))
        c.close()
        #expect(await peer.stdout.wait(timeout: .seconds(20)) { $0 == "unsubscribe alpha" } != nil, "\(peer.stdout.text)")
        b.close()
        #expect(await peer.stdout.wait(timeout: .seconds(20)) { $0 == "unsubscribe beta" } != nil)
    }

    /// A sticky subscribe the protocol cannot read (its payload not an object: a client bug) is
    /// refused to its app and never sent, kept or sent again: another app's sticky subscription on
    /// the same id flows on, on a link that never drops (it looped for every app, issue 44).
    @Test func anUnreadableStickySubscribeIsRefusedAndNeverReachesTheServer() async throws {
        let dir = try TemporaryDirectory()
        let (peer, port) = try await Self.peer()
        defer { peer.stop() }
        let (daemon, socket) = try await Self.daemon(dir, port: port, settings: "")
        defer { daemon.stop() }
        let a = try await JSONRPCProtocolTests.app(socket, "a")
        let b = try await JSONRPCProtocolTests.app(socket, "b")
        let query = "subscription { ticks(name: \"beta\") { name n } }"
        let good: JSONValue = ["type": "subscribe", "id": "1", "payload": ["query": .string(query)]]
        b.send((["id": "sb", "op": "send", "text": .string(good.serialized), "sticky": "beta"] as JSONValue).serialized)
        #expect(await b.reply("sb")?["ok"] == true)
        #expect(await JSONRPCProtocolTests.waitFor(b) { $0["type"] == "next" } != nil)
        let bad: JSONValue = ["type": "subscribe", "id": "1", "payload": "not an object"]
        a.send((["id": "sa", "op": "send", "text": .string(bad.serialized), "sticky": "alpha"] as JSONValue).serialized)
        let refused = await a.reply("sa")
        #expect(refused?.value(at: "error.code") == "invalid_value", "\(String(describing: refused))")
        #expect(refused?.value(at: "error.message")?.stringValue?.contains("\"payload\" object") == true, "\(String(describing: refused))")
        // b's subscription goes on on the first connection: more events, no reconnect, one
        // subscribe ever reached the server.
        let mark = b.lines.count
        #expect(await JSONRPCProtocolTests.waitFor(b, from: mark) { $0["type"] == "next" } != nil)
        b.send(#"{"id":"st","op":"status"}"#)
        let status = await b.reply("st")
        #expect(status?.value(at: "result.reconnects") == 0 && status?.value(at: "result.session.sticky_keys") == 0, "\(String(describing: status))")
        #expect(peer.stdout.lines.filter { $0.hasPrefix("subscribe ") } == ["subscribe beta"], "\(peer.stdout.text)")
    }

    /// One app's malformed subscription makes strawberry close the link (4400) on every open: after
    /// protocol.set_aside_after (3) such opens it is set aside, its holder told, the other app's
    /// subscription flows on one link; status names the culprit; the operator may send it again.
    @Test func aPoisonSubscriptionIsSetAsideAndTheOthersFlowAgain() async throws {
        let dir = try TemporaryDirectory()
        let (peer, port) = try await Self.peer()
        defer { peer.stop() }
        let (daemon, socket) = try await Self.daemon(dir, port: port, settings: "set_aside_after = 3")
        defer { daemon.stop() }
        let a = try await JSONRPCProtocolTests.app(socket, "a")
        let b = try await JSONRPCProtocolTests.app(socket, "b")
        Self.subscribe(a, id: "1", name: "alpha", request: "sa")
        #expect(await JSONRPCProtocolTests.waitFor(a) { $0["type"] == "next" } != nil)
        let query = "subscription { ticks(name: \"beta\") { name n } }"
        Self.send(b, ["type": "subscribe", "id": "1", "payload": ["query": .string(query), "operationName": 7]], request: "sb")
        // Its holder is told, for its own id, with the server's close.
        let told = await JSONRPCProtocolTests.waitFor(b) { $0["type"] == "error" && $0["id"] == "1" }
        let message = told?.value(at: "payload.0.message")?.stringValue ?? ""
        #expect(message.contains("set aside") && message.contains("4400"), "\(String(describing: told)) \(daemon.stderr.text.suffix(3000))")
        // The other app's subscription flows again, on a link that stays up.
        let mark = a.lines.count
        #expect(await JSONRPCProtocolTests.waitFor(a, from: mark) { $0["type"] == "next" } != nil)
        a.send(#"{"id":"st","op":"status"}"#)
        let status = await a.reply("st")
        #expect(status?.value(at: "result.state") == "open")
        #expect(status?.value(at: "result.protocol.culprit")?.stringValue?.contains("operationName") == true, "\(String(describing: status))")
        guard case .array(let subscriptions)? = status?.value(at: "result.protocol.subscriptions") else {
            Issue.record("no subscriptions in \(String(describing: status))")
            return
        }
        #expect(subscriptions.filter { $0["set_aside"] != nil }.count == 1)
        // The operator sends it again: the server closes again, and it is set aside again.
        let cleared = try spawnAndWait(CtlTests.ctl, ["--socket", socket, "subscriptions", "--clear"])
        #expect(cleared.stdout == "1 set-aside subscription sent again\n", "\(cleared.stderr)")
        let again = await JSONRPCProtocolTests.waitFor(b, from: b.lines.count) { $0["type"] == "error" && $0["id"] == "1" }
        #expect(again != nil)
    }
}
