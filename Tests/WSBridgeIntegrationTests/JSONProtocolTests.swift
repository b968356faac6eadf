import Foundation
import Testing
import WSBridgeProtocol

/// `upstream.protocol = "json"` against a Home-Assistant-style server (Tests/peers/json_peer.py):
/// ids that must only rise on a connection, subscriptions whose events carry the subscribing
/// message's id, a `{"ping":N}` keepalive to answer `{"pong":N}`, and a broadcast whose "id" is
/// data. Two apps using the same ids at the same time, over one link (issue 33).
@Suite(.serialized) struct JSONProtocolTests {
    /// Pings every 0.2 s, each to be answered within 0.5 s.
    static func peer(port: Int = 0) async throws -> (ManagedProcess, Int) {
        try await pythonPeer("json_peer.py", port: port, ["--ping-interval", "0.2", "--ping-deadline", "0.5"])
    }

    static func daemon(_ dir: TemporaryDirectory, port: Int) async throws -> (ManagedProcess, String) {
        try await protocolDaemon(
            dir, url: "ws://127.0.0.1:\(port)/", protocol: "json",
            settings: """
                id = "id"
                [[protocol.reply]]
                when = "ping"
                send = '{"pong":${msg:ping}}'
                """)
    }

    static func line(_ op: String, _ request: String, _ message: JSONValue, _ more: [(String, JSONValue)] = []) -> String {
        let line: JSONValue = .object([("id", .string(request)), ("op", .string(op)), ("text", .string(message.serialized))] + more)
        return line.serialized
    }

    /// A subscription the json way: a sticky send that carries an id.
    static func subscribe(_ c: SocketClient, id: Int, type: String, request: String) {
        let message: JSONValue = ["id": .number(JSONNumber(id)), "type": "subscribe_events", "event_type": .string(type)]
        c.send(Self.line("send", request, message, [("sticky", .string("events-\(type)"))]))
    }

    /// The events of `type` this app received, from line `from` on: their ids and numbers.
    static func events(_ c: SocketClient, from: Int = 0) -> [(id: JSONValue?, type: String?, n: Int?)] {
        JSONRPCProtocolTests.received(c, from: from).filter { $0["type"] == "event" }.map {
            ($0["id"], $0.value(at: "event.event_type")?.stringValue, $0.value(at: "event.n")?.intValue)
        }
    }

    @Test func twoAppsOnTheSameIdsGetTheirOwnAnswersAndEventsAndTheKeepaliveIsAnswered() async throws {
        let dir = try TemporaryDirectory()
        let (peer, port) = try await Self.peer()
        defer { peer.stop() }
        let (daemon, socket) = try await Self.daemon(dir, port: port)
        defer { daemon.stop() }
        let a = try await JSONRPCProtocolTests.app(socket, "a")
        let b = try await JSONRPCProtocolTests.app(socket, "b")
        // The operator's view: the wire as it is.
        let tap = try await JSONRPCProtocolTests.app(socket, "tap")
        tap.send(#"{"id":"all","op":"subscribe","all":true}"#)
        #expect(await tap.reply("all")?["ok"] == true)

        // A request needs no match: its answer is what carries its id. Both apps use id 1.
        a.send(Self.line("request", "ra", ["id": 1, "type": "echo", "value": "from a"]))
        b.send(Self.line("request", "rb", ["id": 1, "type": "echo", "value": "from b"]))
        let ra = await a.reply("ra")
        let rb = await b.reply("rb")
        #expect(ra?.value(at: "result.json.result") == "from a" && ra?.value(at: "result.json.id") == 1, "\(String(describing: ra))")
        #expect(rb?.value(at: "result.json.result") == "from b" && rb?.value(at: "result.json.id") == 1, "\(String(describing: rb))")

        // Each subscribes under id 2, to a different event type.
        Self.subscribe(a, id: 2, type: "alpha", request: "sa")
        Self.subscribe(b, id: 2, type: "beta", request: "sb")
        #expect(await a.reply("sa")?.value(at: "result.status") == "sent")
        for (c, type) in [(a, "alpha"), (b, "beta")] {
            let result = await JSONRPCProtocolTests.waitFor(c) { $0["type"] == "result" && $0["id"] == 2 }
            #expect(result?["success"] == true)
            let event = await JSONRPCProtocolTests.waitFor(c) { $0["type"] == "event" && ($0.value(at: "event.n")?.intValue ?? 0) >= 5 }
            #expect(event?["id"] == 2 && event?.value(at: "event.event_type")?.stringValue == type, "\(String(describing: event))")
        }
        #expect(Self.events(a).allSatisfy { $0.type == "alpha" && $0.id == 2 })
        #expect(Self.events(b).allSatisfy { $0.type == "beta" && $0.id == 2 })
        // A message whose "id" nobody holds is data: for every subscriber.
        for c in [a, b] {
            #expect(await JSONRPCProtocolTests.waitFor(c) { $0["id"] == "BTC" } != nil)
        }
        // The keepalive: more than 3 deadlines (1.5 s) of pings answered on one connection.
        #expect(await peer.stdout.wait(timeout: .seconds(30)) { $0 == "pong 10" } != nil, "\(peer.stdout.text)")
        #expect(peer.stdout.lines.filter { $0 == "connected" }.count == 1)
        #expect(!peer.stdout.text.contains("closed "), "\(peer.stdout.text)")
        // Apps never see the pings the daemon answers; the tap sees them, and both answers with
        // the ids the server saw (two different ones).
        #expect(!JSONRPCProtocolTests.received(a).contains { $0["ping"] != nil })
        let wire = JSONRPCProtocolTests.received(tap)
        #expect(wire.contains { $0["ping"] != nil })
        let answers = wire.filter { $0["result"] == "from a" || $0["result"] == "from b" }
        #expect(answers.count == 2 && Set(answers.compactMap { $0["id"]?.intValue }).count == 2, "\(answers)")
    }

    /// With no `[[protocol.reply]]`, a subscription's events are routed by a scan of their id,
    /// not a parse (issue 46): two apps holding one subscription under their own ids each get
    /// every event under theirs, the rest of its bytes as the server sent them, in order, none
    /// lost; a broadcast whose "id" is data reaches both; a filtered subscriber (whose filter
    /// needs the messages read, so they are parsed again) changes nothing for them.
    @Test func eventsRoutedByAScanReachEachHolderUnderItsOwnId() async throws {
        let dir = try TemporaryDirectory()
        let (peer, port) = try await pythonPeer("json_peer.py", port: 0, ["--ping-interval", "3600"])
        defer { peer.stop() }
        let (daemon, socket) = try await protocolDaemon(dir, url: "ws://127.0.0.1:\(port)/", protocol: "json", settings: "id = \"id\"")
        defer { daemon.stop() }
        let a = try await JSONRPCProtocolTests.app(socket, "a")
        let b = try await JSONRPCProtocolTests.app(socket, "b")
        Self.subscribe(a, id: 2, type: "alpha", request: "sa")
        #expect(await JSONRPCProtocolTests.waitFor(a) { $0["type"] == "event" } != nil)
        Self.subscribe(b, id: 9, type: "alpha", request: "sb")
        for c in [a, b] {
            #expect(await JSONRPCProtocolTests.waitFor(c) { $0["type"] == "event" && ($0.value(at: "event.n")?.intValue ?? 0) >= 20 } != nil)
            #expect(await JSONRPCProtocolTests.waitFor(c) { $0["id"] == "BTC" } != nil)
        }
        let filtered = try await JSONRPCProtocolTests.app(socket, "filtered")
        filtered.send(#"{"id":"f","op":"subscribe","filter":{"field":"id","equals":"BTC"}}"#)
        #expect(await filtered.reply("f")?["ok"] == true)
        let marks = (a.lines.count, b.lines.count)
        for (c, mark) in [(a, marks.0), (b, marks.1)] {
            // At least 25 events each (b came later: from its first on, however late that was).
            let enough = max(40, (Self.events(c).compactMap(\.n).min() ?? 0) + 25)
            #expect(await JSONRPCProtocolTests.waitFor(c, from: mark) { $0["type"] == "event" && ($0.value(at: "event.n")?.intValue ?? 0) >= enough } != nil)
        }
        #expect(await JSONRPCProtocolTests.waitFor(filtered) { $0["id"] == "BTC" } != nil)
        for (c, id) in [(a, 2), (b, 9)] {
            let events = Self.events(c)
            #expect(events.allSatisfy { $0.id?.intValue == id && $0.type == "alpha" }, "\(c.lines.name): \(events.prefix(5))")
            let (lost, duplicated) = lostAndDuplicated(events.compactMap(\.n))
            #expect(lost == 0 && duplicated == 0, "\(c.lines.name): \(lost) lost, \(duplicated) duplicated")
            // Routed lines (sent in a batch per read) and broadcast ones in one stream: its seqs
            // only rise.
            let seqs = c.lines.lines.compactMap { try? JSONValue.parse($0) }.filter { $0["type"] == "message" }.compactMap { $0["seq"]?.intValue }
            #expect(seqs.count > 25 && zip(seqs, seqs.dropFirst()).allSatisfy { $0 < $1 }, "\(c.lines.name): \(seqs.prefix(60))")
        }
        // The events' own bytes, the id's aside: as the server wrote them (no re-serializing).
        let raw = a.lines.lines.compactMap { line -> String? in
            guard let m = try? JSONValue.parse(line), m["type"] == "message", let data = m["data"]?.stringValue, data.contains(#""type": "event""#)
            else { return nil }
            return data
        }
        #expect(!raw.isEmpty, "the server's spacing (json.dumps) kept: \(a.lines.lines.suffix(3))")

        // The holders change while the subscription flows (the scanned route and its one
        // holder's client are kept only while neither changes): the filtered subscriber and a
        // leave, b alone goes on under 9; c comes under 5; b leaves, c alone goes on under 5.
        filtered.close()
        a.close()
        func later(_ c: SocketClient, by more: Int) async -> Bool {
            let n = (Self.events(c).compactMap(\.n).max() ?? 0) + more
            return await JSONRPCProtocolTests.waitFor(c) { $0["type"] == "event" && ($0.value(at: "event.n")?.intValue ?? 0) >= n } != nil
        }
        #expect(await later(b, by: 20))
        let c = try await JSONRPCProtocolTests.app(socket, "c")
        Self.subscribe(c, id: 5, type: "alpha", request: "sc")
        #expect(await later(c, by: 20))
        #expect(await later(b, by: 5))
        b.close()
        #expect(await later(c, by: 20))
        for (client, id) in [(b, 9), (c, 5)] {
            let events = Self.events(client)
            #expect(events.allSatisfy { $0.id?.intValue == id && $0.type == "alpha" }, "\(client.lines.name): \(events.suffix(5))")
            let (lost, duplicated) = lostAndDuplicated(events.compactMap(\.n))
            #expect(lost == 0 && duplicated == 0, "\(client.lines.name): \(lost) lost, \(duplicated) duplicated")
        }
    }

    @Test func subscriptionsFlowAgainAfterTwentyServerRestartsUnderTheAppsIds() async throws {
        let dir = try TemporaryDirectory()
        var (peer, port) = try await Self.peer()
        defer { peer.stop() }
        let (daemon, socket) = try await Self.daemon(dir, port: port)
        defer { daemon.stop() }
        let a = try await JSONRPCProtocolTests.app(socket, "a")
        let b = try await JSONRPCProtocolTests.app(socket, "b")
        Self.subscribe(a, id: 7, type: "alpha", request: "sa")
        Self.subscribe(b, id: 7, type: "beta", request: "sb")
        var report: [String] = []
        for restart in 0...20 {
            // Marked before the server starts again: its first events may come before it says so.
            var marks = (a.lines.count, b.lines.count)
            if restart > 0 {
                peer.stop()
                _ = await peer.waitForExit()
                marks = (a.lines.count, b.lines.count)
                (peer, _) = try await Self.peer(port: port)
            }
            for (c, mark, type) in [(a, marks.0, "alpha"), (b, marks.1, "beta")] {
                // Three events of this connection reach the app, under its id.
                let third = await JSONRPCProtocolTests.waitFor(c, from: mark) { $0["type"] == "event" && $0.value(at: "event.n") == 3 }
                #expect(
                    third?["id"] == 7 && third?.value(at: "event.event_type")?.stringValue == type, "restart \(restart): \(daemon.stderr.text.suffix(2000))")
            }
            // The server refused no id (they rose across every connection).
            #expect(!peer.stdout.text.contains("closed 4002"), "restart \(restart): \(peer.stdout.text)")
        }
        // Lost and duplicated: within each connection the server numbers events 1, 2, 3...;
        // a number that does not follow the one before (other than a new connection's 1) is a
        // loss or a duplicate.
        for (name, c) in [("a", a), ("b", b)] {
            let (lost, duplicated) = lostAndDuplicated(Self.events(c).compactMap(\.n))
            report.append("\(name): \(Self.events(c).count) events, \(lost) lost, \(duplicated) duplicated within connections")
            #expect(lost == 0 && duplicated == 0)
            #expect(Self.events(c).allSatisfy { $0.id == 7 })
        }
        print("json 20 restarts: " + report.joined(separator: "; "))
    }

    /// A well-formed subscription the server answers by closing the connection (4403), added by
    /// one app after another app's working one: after protocol.set_aside_after (3) such opens it
    /// is set aside and its holder told; the working one was never blamed and flows again.
    @Test func aSubscriptionTheServerClosesOnIsSetAsideAndTheWorkingOneFlowsAgain() async throws {
        let dir = try TemporaryDirectory()
        let (peer, port) = try await Self.peer()
        defer { peer.stop() }
        let (daemon, socket) = try await Self.daemon(dir, port: port)
        defer { daemon.stop() }
        let a = try await JSONRPCProtocolTests.app(socket, "a")
        let b = try await JSONRPCProtocolTests.app(socket, "b")
        Self.subscribe(a, id: 1, type: "alpha", request: "sa")
        #expect(await JSONRPCProtocolTests.waitFor(a) { $0["type"] == "event" && $0.value(at: "event.n") == 3 } != nil)
        Self.subscribe(b, id: 1, type: "forbidden", request: "sb")
        let told = await JSONRPCProtocolTests.waitFor(b) { $0["id"] == 1 && $0["error"]?.stringValue?.contains("set aside") == true }
        #expect(told?["error"]?.stringValue?.contains("4403") == true, "\(String(describing: told)) \(daemon.stderr.text.suffix(3000))")
        // The working subscription flows again: three events of the connection after the server's
        // third close (everything after the third open line in a's stream came on it).
        let opens = await a.lines.wait(count: 3, timeout: .seconds(60)) { $0.contains(#""type":"state","state":"open""#) }
        let mark = opens.count == 3 ? (a.lines.lines.lastIndex(of: opens[2]) ?? 0) : a.lines.count
        #expect(opens.count == 3, "\(a.lines.text.suffix(2000))")
        let third = await JSONRPCProtocolTests.waitFor(a, from: mark) { $0["type"] == "event" && $0.value(at: "event.n") == 3 }
        #expect(third?["id"] == 1 && third?.value(at: "event.event_type") == "alpha")
        a.send(#"{"id":"st","op":"status"}"#)
        let status = await a.reply("st")
        #expect(status?.value(at: "result.state") == "open")
        guard case .array(let subscriptions)? = status?.value(at: "result.protocol.subscriptions") else {
            throw TestFailure("no subscriptions in \(String(describing: status))")
        }
        let aside = subscriptions.filter { $0["set_aside"] != nil }.map { $0["key"]?.stringValue ?? "" }
        #expect(aside.count == 1 && aside.allSatisfy { $0.contains("forbidden") }, "\(subscriptions)")
        // The server closed three connections on it, and never on the working one alone.
        #expect(peer.stdout.lines.filter { $0.hasPrefix("closed 4403") }.count == 3, "\(peer.stdout.text.suffix(2000))")
    }

    @Test func aRequestInFlightWhenTheLinkDropsGetsLinkLostAtOnce() async throws {
        let dir = try TemporaryDirectory()
        let (peer, port) = try await Self.peer()
        defer { peer.stop() }
        let (daemon, socket) = try await Self.daemon(dir, port: port)
        defer { daemon.stop() }
        let a = try await JSONRPCProtocolTests.app(socket, "a")
        a.send(Self.line("request", "slow", ["id": 3, "type": "slow", "seconds": 120], [("timeout", 600)]))
        // The server has it (its answer would come in two minutes); the server goes.
        #expect(await peer.stdout.wait(timeout: .seconds(20)) { $0.hasPrefix("call slow ") } != nil)
        peer.stop()
        let reply = await a.reply("slow", timeout: .seconds(60))
        #expect(reply?.value(at: "error.code") == "link_lost", "\(String(describing: reply))")
        // Told instead of the protocol's own error line: the app gets no second answer for id 3.
        #expect(!JSONRPCProtocolTests.received(a).contains { $0["id"] == 3 })
    }
}
