import Foundation
import Testing
import WSBridgeProtocol

/// `upstream.protocol = "jsonrpc"` against a real JSON-RPC server (Tests/peers/jsonrpc_peer.py,
/// Python `websockets`, with server-assigned subscription ids): two apps using the same ids at
/// the same time, over one link (issue 33).
@Suite(.serialized) struct JSONRPCProtocolTests {
    /// The JSON-RPC server, on `port` (0: any).
    static func peer(port: Int = 0) async throws -> (ManagedProcess, Int) {
        try await pythonPeer("jsonrpc_peer.py", port: port)
    }

    static func daemon(_ dir: TemporaryDirectory, port: Int) async throws -> (ManagedProcess, String) {
        try await protocolDaemon(dir, url: "ws://127.0.0.1:\(port)/", protocol: "jsonrpc")
    }

    static func app(_ socket: String, _ name: String) async throws -> SocketClient {
        try await SocketClient.connected(to: socket, name: name)
    }

    /// `send` of one JSON-RPC message (its text), as an app's client library would write it.
    static func call(_ c: SocketClient, _ rpc: String, id: String) {
        c.send(#"{"id":"\#(id)","op":"send","text":"\#(rpc.replacingOccurrences(of: "\"", with: "\\\""))"}"#)
    }

    /// The JSON-RPC messages this app received (the payloads of its message lines), from `from` on.
    static func received(_ c: SocketClient, from: Int = 0) -> [JSONValue] {
        c.lines.lines.dropFirst(from).compactMap { line -> JSONValue? in
            guard let m = try? JSONValue.parse(line), m["type"] == "message", let data = m["data"]?.stringValue else { return nil }
            return try? JSONValue.parse(data)
        }
    }

    static func waitFor(_ c: SocketClient, from: Int = 0, _ predicate: @escaping @Sendable (JSONValue) -> Bool) async -> JSONValue? {
        let line = await c.lines.wait(from: from, timeout: .seconds(20)) { line in
            guard let m = try? JSONValue.parse(line), m["type"] == "message", let data = m["data"]?.stringValue,
                let rpc = try? JSONValue.parse(data)
            else { return false }
            return predicate(rpc)
        }
        return line.flatMap { try? JSONValue.parse($0) }.flatMap { $0["data"]?.stringValue }.flatMap { try? JSONValue.parse($0) }
    }

    @Test func twoAppsCallingWithTheSameIdEachGetTheirOwnAnswer() async throws {
        let dir = try TemporaryDirectory()
        let (peer, port) = try await Self.peer()
        defer { peer.stop() }
        let (daemon, socket) = try await Self.daemon(dir, port: port)
        defer { daemon.stop() }
        let a = try await Self.app(socket, "a")
        let b = try await Self.app(socket, "b")
        for round in 0..<5 {
            Self.call(a, #"{"jsonrpc":"2.0","id":1,"method":"add","params":[10,\#(round)]}"#, id: "a\(round)")
            Self.call(b, #"{"jsonrpc":"2.0","id":1,"method":"add","params":[1000,\#(round)]}"#, id: "b\(round)")
            let mine = await Self.waitFor(a) { $0["result"]?.intValue == 10 + round }
            let theirs = await Self.waitFor(b) { $0["result"]?.intValue == 1000 + round }
            #expect(mine?["id"] == 1 && theirs?["id"] == 1, "\(String(describing: mine)) \(String(describing: theirs))")
        }
        // Neither saw the other's answers, and the server never saw one id twice in flight.
        #expect(!Self.received(a).contains { ($0["result"]?.intValue ?? 0) >= 1000 })
        #expect(!Self.received(b).contains { ($0["result"]?.intValue ?? 1000) < 1000 })
        #expect(!a.lines.text.contains("already in flight") && !b.lines.text.contains("already in flight"))
        // The first call the daemon read kept id 1 on the wire; every other call went as a fresh
        // id (an id is not used twice on a link). Every answer came to its app as the server's
        // bytes (Python's `"id": 1`), the id's text replaced in place where it was another: found
        // by a scan and spliced, never parsed and written again (issue 46).
        let answers = [a, b].flatMap { c in
            c.lines.lines.compactMap { line -> String? in
                guard let m = try? JSONValue.parse(line), m["type"] == "message", let data = m["data"]?.stringValue, data.contains("result") else { return nil }
                return data
            }
        }
        #expect(answers.count == 10 && answers.allSatisfy { $0.hasPrefix(#"{"jsonrpc": "2.0", "id": 1, "result": "#) }, "\(answers)")
    }

    @Test func aSharedSubscriptionGoesUpstreamOnceSurvivesServerRestartsAndEndsWithItsLastHolder() async throws {
        let dir = try TemporaryDirectory()
        var (peer, port) = try await Self.peer()
        defer { peer.stop() }
        let (daemon, socket) = try await Self.daemon(dir, port: port)
        defer { daemon.stop() }
        let a = try await Self.app(socket, "a")
        let b = try await Self.app(socket, "b")
        Self.call(a, #"{"jsonrpc":"2.0","id":5,"method":"eth_subscribe","params":["ticks"]}"#, id: "sa")
        let answer = await Self.waitFor(a) { $0["id"] == 5 && $0["result"] != nil }
        let subscription = try #require(answer?["result"]?.stringValue, "\(a.lines.text)")
        // The second app's identical subscription: answered by the daemon, the same id, nothing upstream.
        Self.call(b, #"{"jsonrpc":"2.0","id":5,"method":"eth_subscribe","params":["ticks"]}"#, id: "sb")
        #expect(await b.reply("sb")?.value(at: "result.status") == "answered")
        #expect(await Self.waitFor(b) { $0["id"] == 5 }?["result"]?.stringValue == subscription)
        for c in [a, b] {
            #expect(await Self.waitFor(c) { $0.value(at: "params.subscription")?.stringValue == subscription } != nil)
        }
        #expect(peer.stdout.lines.filter { $0.hasPrefix("subscribe ") }.count == 1)
        // status lists it: one upstream subscription, two apps holding it under their own ids.
        a.send(#"{"id":"st","op":"status"}"#)
        let status = await a.reply("st")
        #expect(status?.value(at: "result.protocol.name") == "jsonrpc", "\(String(describing: status))")
        guard case .array(let holders)? = status?.value(at: "result.protocol.subscriptions.0.holders") else {
            Issue.record("no holders in \(String(describing: status))")
            return
        }
        #expect(holders.count == 2 && holders.allSatisfy { $0["id"] == "5" && $0["pid"] != nil })
        // The operator's list: one row per holder, the upstream id shared by 2.
        let listed = try spawnAndWait(CtlTests.ctl, ["--socket", socket, "subscriptions"])
        let rows = listed.stdout.split(separator: "\n").dropFirst()
        #expect(rows.count == 2 && rows.allSatisfy { $0.hasPrefix("1 ") && $0.contains(" 2 ") && $0.contains("eth_subscribe") }, "\(listed.stdout)")

        // The server restarts (a new server-assigned id): the apps' subscription flows again,
        // under the id they know, with nothing done by them.
        for restart in 1...20 {
            peer.stop()
            _ = await peer.waitForExit()
            let marks = (a.lines.count, b.lines.count)
            (peer, _) = try await Self.peer(port: port)
            guard let line = await peer.stdout.wait(timeout: .seconds(30), { $0.hasPrefix("subscribe ") }) else {
                throw TestFailure("restart \(restart): not subscribed again: \(daemon.stderr.text)")
            }
            #expect(String(line.dropFirst("subscribe ".count)) != subscription)
            for (c, mark) in [(a, marks.0), (b, marks.1)] {
                let event = await Self.waitFor(c, from: mark) { $0["method"] == "eth_subscription" }
                #expect(event?.value(at: "params.subscription")?.stringValue == subscription, "restart \(restart): \(String(describing: event))")
            }
        }
        // The new server ids never reach the apps; nothing lost or doubled within a connection.
        #expect(!Self.received(a).contains { $0["id"] == 5 && $0["result"]?.stringValue != subscription })
        for (name, c) in [("a", a), ("b", b)] {
            let numbers = Self.received(c).compactMap { $0.value(at: "params.result.n")?.intValue }
            let (lost, duplicated) = lostAndDuplicated(numbers)
            print("jsonrpc 20 restarts: \(name): \(numbers.count) events, \(lost) lost, \(duplicated) duplicated within connections")
            #expect(lost == 0 && duplicated == 0)
        }

        // The first holder leaves: the subscription stays (the other still gets its events).
        a.close()
        let mark = b.lines.count
        #expect(await Self.waitFor(b, from: mark) { $0["method"] == "eth_subscription" } != nil)
        let after = b.lines.count
        #expect(await Self.waitFor(b, from: after) { $0["method"] == "eth_subscription" } != nil)
        #expect(!peer.stdout.lines.contains { $0.hasPrefix("unsubscribe ") })
        // The last leaves: ended upstream.
        b.close()
        #expect(await peer.stdout.wait(timeout: .seconds(20)) { $0 == "subscriptions 0" } != nil, "\(peer.stdout.text)")
    }

    @Test func aCallInFlightWhenTheLinkDropsIsAnsweredWithAnErrorAtOnce() async throws {
        let dir = try TemporaryDirectory()
        let (peer, port) = try await Self.peer()
        defer { peer.stop() }
        let (daemon, socket) = try await Self.daemon(dir, port: port)
        defer { daemon.stop() }
        let a = try await Self.app(socket, "a")
        Self.call(a, #"{"jsonrpc":"2.0","id":"x","method":"slow","params":[60]}"#, id: "s")
        #expect(await peer.stdout.wait { $0.hasPrefix("call slow ") } != nil)
        peer.stop()
        let error = await Self.waitFor(a) { $0["id"] == "x" }
        #expect(error?.value(at: "error.code") == -32000, "\(String(describing: error))")
        #expect(error?.value(at: "error.message")?.stringValue?.contains("before the answer came") == true)
    }
}
