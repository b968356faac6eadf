import Foundation
import Testing
import WSBridgeProtocol

/// A server of Tests/peers on `port` (0: any), once it says `listening PORT`; and its port.
func pythonPeer(_ script: String, port: Int, _ arguments: [String] = []) async throws -> (ManagedProcess, Int) {
    let process = try ManagedProcess(Paths.python, ["-u", "\(Paths.root)/Tests/peers/\(script)", "--port", "\(port)"] + arguments, name: script)
    guard let line = await process.stdout.wait(timeout: .seconds(30), { $0.hasPrefix("listening ") }), let bound = Int(line.dropFirst(10)) else {
        process.stop()
        throw TestFailure("\(script) did not start: \(process.stderr.text)")
    }
    return (process, bound)
}

/// A daemon speaking `upstream.protocol = name` to the peer at `url` (`settings`: the lines of
/// its [protocol] section), once its link is open; and its socket.
func protocolDaemon(_ dir: TemporaryDirectory, url: String, protocol name: String, settings: String = "") async throws -> (ManagedProcess, String) {
    let socket = dir.file("d.sock")
    let config = try writeDaemonConfig(
        dir, "wsbridged", url: url, socket: socket, upstream: "protocol = \"\(name)\"", extra: settings.isEmpty ? "" : "[protocol]\n\(settings)")
    let daemon = try ManagedProcess.daemon(["--config", config, "--log-level", "debug"])
    guard await daemon.awaitLink(.open) else {
        daemon.stop()
        throw TestFailure("no open link: \(daemon.stderr.text)")
    }
    return (daemon, socket)
}

/// Events numbered 1, 2, 3... on each connection (a new connection's start again at 1): how many
/// numbers a consumer missed, and how many it got twice, within connections. The count starts at
/// the first number seen (an app that joins a subscription already running did not miss what
/// came before it).
func lostAndDuplicated(_ numbers: [Int]) -> (lost: Int, duplicated: Int) {
    var lost = 0
    var duplicated = 0
    var last: Int?
    for n in numbers {
        guard let previous = last, n != 1 else {
            last = n
            continue
        }
        if n <= previous { duplicated += 1 } else { lost += n - previous - 1 }
        last = n
    }
    return (lost, duplicated)
}

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
        let c = try SocketClient(path: socket, name: name)
        guard await c.lines.wait(containing: "\"type\":\"hello\"") != nil else { throw TestFailure("no hello") }
        return c
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
        // The first call the daemon read kept id 1 on the wire, so its answer came to its app as
        // the server's bytes (Python's `"id": 1`); every other call went as a fresh id (an id is
        // not used twice on a link), and its answer was written again with the app's id 1.
        let answers = [a, b].flatMap { c in
            c.lines.lines.compactMap { line -> String? in
                guard let m = try? JSONValue.parse(line), m["type"] == "message", let data = m["data"]?.stringValue, data.contains("result") else { return nil }
                return data
            }
        }
        #expect(answers.filter { $0.hasPrefix(#"{"jsonrpc": "2.0", "id": 1, "result": "#) }.count == 1, "\(answers)")
        #expect(answers.filter { $0.hasPrefix(#"{"jsonrpc":"2.0","id":1,"result":"#) }.count == 9, "\(answers)")
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

/// `upstream.protocol = "jsonrpc"` against a JSON-RPC server nobody here wrote: aiohttp-json-rpc
/// from PyPI (Tests/peers/aiohttp_jsonrpc_peer.py only registers its methods). Two apps calling
/// with the same ids at the same time, through `request` without `match` (issue 33).
@Suite(.serialized) struct ThirdPartyJSONRPCTests {
    static func rpc(_ id: Int, _ method: String, _ params: JSONValue) -> String {
        let message: JSONValue = ["jsonrpc": "2.0", "id": .number(JSONNumber(id)), "method": .string(method), "params": params]
        return message.serialized
    }

    static func request(_ c: SocketClient, _ text: String, id: String, timeout: Int = 20) {
        let line: JSONValue = ["id": .string(id), "op": "request", "text": .string(text), "timeout": .number(JSONNumber(timeout))]
        c.send(line.serialized)
    }

    @Test func twoAppsOnTheSameIdsGetTheirOwnAnswersAndACallInFlightGetsLinkLost() async throws {
        let dir = try TemporaryDirectory()
        let (peer, port) = try await pythonPeer("aiohttp_jsonrpc_peer.py", port: 0)
        defer { peer.stop() }
        let (daemon, socket) = try await JSONRPCProtocolTests.daemon(dir, port: port)
        defer { daemon.stop() }
        let a = try await JSONRPCProtocolTests.app(socket, "a")
        let b = try await JSONRPCProtocolTests.app(socket, "b")
        for round in 0..<10 {
            Self.request(a, Self.rpc(1, "add", [10, .number(JSONNumber(round))]), id: "a\(round)")
            Self.request(b, Self.rpc(1, "add", [1000, .number(JSONNumber(round))]), id: "b\(round)")
            let ra = await a.reply("a\(round)")
            let rb = await b.reply("b\(round)")
            #expect(ra?.value(at: "result.json.result")?.intValue == 10 + round && ra?.value(at: "result.json.id") == 1, "\(String(describing: ra))")
            #expect(rb?.value(at: "result.json.result")?.intValue == 1000 + round && rb?.value(at: "result.json.id") == 1, "\(String(describing: rb))")
        }
        // The server saw twenty different ids.
        let ids = peer.stdout.lines.filter { $0.hasPrefix("call add ") }
        #expect(ids.count == 20 && Set(ids).count == 20, "\(ids)")
        // Its topics are its own fan-out (notifications without an id): for every subscriber.
        Self.request(a, Self.rpc(2, "subscribe", ["ticks"]), id: "sub")
        #expect(await a.reply("sub")?.value(at: "result.json.result") == ["ticks"])
        for c in [a, b] {
            #expect(await JSONRPCProtocolTests.waitFor(c) { $0["method"] == "ticks" } != nil)
        }
        // A call in flight when the server goes: link_lost at once, not at its 60 s timeout.
        Self.request(a, Self.rpc(3, "slow", [120]), id: "slow", timeout: 600)
        #expect(await peer.stdout.wait(timeout: .seconds(20)) { $0.hasPrefix("call slow ") } != nil)
        peer.stop()
        let lost = await a.reply("slow", timeout: .seconds(60))
        #expect(lost?.value(at: "error.code") == "link_lost", "\(String(describing: lost))")
    }
}
