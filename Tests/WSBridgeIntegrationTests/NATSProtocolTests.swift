import Foundation
import Testing
import WSBridgeCore
import WSBridgeProtocol

/// Debian's nats-server with a WebSocket listener on loopback, its monitoring port for the
/// server's own view of the subscriptions.
struct NATSServer {
    let process: ManagedProcess
    let websocket: Int
    let monitor: Int
    /// Its port for NATS clients over TCP.
    let client: Int

    /// Starts one (ports 0: any, found in its log); `trace`: every protocol operation logged.
    /// `extra`: more of its configuration (an `authorization` block).
    static func start(
        _ dir: TemporaryDirectory, websocket: Int = 0, monitor: Int = 0, client: Int = 0, trace: Bool = false, extra: String = ""
    ) async throws
        -> NATSServer
    {
        func port(_ p: Int) -> String { p == 0 ? "-1" : "\(p)" }
        let config = try dir.write(
            "nats.conf",
            """
            listen: "127.0.0.1:\(port(client))"
            http: "127.0.0.1:\(port(monitor))"
            ping_interval: "1s"
            ping_max: 2
            websocket { listen: "127.0.0.1:\(port(websocket))", no_tls: true }
            \(extra)
            """)
        let process = try ManagedProcess("/usr/sbin/nats-server", ["-c", config] + (trace ? ["-V"] : []), name: "nats-server")
        guard await process.stderr.wait(containing: "Server is ready") != nil,
            let ws = process.stderr.lines.first(where: { $0.contains("Listening for websocket clients on ws://127.0.0.1:") }),
            let http = process.stderr.lines.first(where: { $0.contains("Starting http monitor on 127.0.0.1:") }),
            let wsPort = Int(ws.split(separator: ":").last ?? ""), let httpPort = Int(http.split(separator: ":").last ?? ""),
            let tcp = process.stderr.lines.first(where: { $0.contains("Listening for client connections on 127.0.0.1:") }),
            let clientPort = Int(tcp.split(separator: ":").last ?? "")
        else {
            process.stop()
            throw TestFailure("nats-server did not start: \(process.stderr.text)")
        }
        return NATSServer(process: process, websocket: wsPort, monitor: httpPort, client: clientPort)
    }

    /// The subjects subscribed on its connections (`/connz?subs=1`), the daemon's inbox left out.
    func subjects() throws -> [String] {
        let r = try spawnAndWait("/usr/bin/curl", ["-sf", "http://127.0.0.1:\(self.monitor)/connz?subs=1"])
        guard let connz = try? JSONValue.parse(r.stdout), case .array(let connections)? = connz["connections"] else { return [] }
        return connections.flatMap { c -> [String] in
            guard case .array(let subs)? = c["subscriptions_list"] else { return [] }
            return subs.compactMap(\.stringValue).filter { !$0.hasPrefix("_INBOX.wsbridged-") }
        }.sorted()
    }

    func stop() async {
        self.process.stop()
        _ = await self.process.waitForExit()
    }
}

/// `upstream.protocol = "nats"` against Debian's nats-server 2.9 over its WebSocket listener.
@Suite(.serialized) struct NATSProtocolTests {
    static func url(_ server: NATSServer) -> String { "ws://127.0.0.1:\(server.websocket)/" }

    static func publish(_ app: TextApp, _ subject: String, _ payload: String, request: String) {
        app.send("PUB \(subject) \(payload.utf8.count)\r\n\(payload)\r\n", request: request)
    }

    @Test func twoAppsOnSidOneGetTheirOwnMessagesShareASubjectAndKeepItAcrossServerRestarts() async throws {
        let dir = try TemporaryDirectory()
        var server = try await NATSServer.start(dir)
        defer { server.process.stop() }
        let (daemon, socket) = try await protocolDaemon(dir, url: Self.url(server), protocol: "nats")
        defer { daemon.stop() }
        let a = try await TextApp.connect(socket, "a", of: daemon)
        let b = try await TextApp.connect(socket, "b", of: daemon)
        let c = try await TextApp.connect(socket, "c", of: daemon)
        let p = try await TextApp.connect(socket, "publisher", of: daemon)
        a.send("SUB prices.btc 1\r\n", request: "sa")
        b.send("SUB prices.eth 1\r\n", request: "sb")
        c.send("SUB prices.btc 7\r\n", request: "sc")
        for (app, id) in [(a, "sa"), (b, "sb"), (c, "sc")] { #expect(await app.client.reply(id)?["ok"] == true) }
        // One upstream subscription per subject, whatever the apps' sids.
        #expect(try server.subjects() == ["prices.btc", "prices.eth"])
        // The operator's view of the wire, selected by subject on the views.
        let tap = try await TextApp.connect(socket, "tap", of: daemon)
        tap.client.send(#"{"id":"t","op":"subscribe","all":true,"filter":{"field":"subject","equals":"prices.eth"}}"#)
        #expect(await tap.client.reply("t")?["ok"] == true)
        // Three operations in one send: three messages, each with its own seq.
        p.send("PUB prices.btc 7\r\n{\"n\":1}\r\nPUB prices.eth 7\r\n{\"n\":1}\r\nPUB prices.btc 1\r\nx\r\n", request: "p")
        #expect(await a.wait { $0 == "MSG prices.btc 1 7\r\n{\"n\":1}\r\n" } != nil, "\(a.client.lines.text)")
        #expect(await c.wait { $0 == "MSG prices.btc 7 7\r\n{\"n\":1}\r\n" } != nil, "\(c.client.lines.text)")
        #expect(await b.wait { $0 == "MSG prices.eth 1 7\r\n{\"n\":1}\r\n" } != nil, "\(b.client.lines.text)")
        #expect(await a.wait { $0 == "MSG prices.btc 1 1\r\nx\r\n" } != nil)
        #expect(!a.texts().contains { $0.contains("prices.eth") } && !b.texts().contains { $0.contains("prices.btc") })
        // The tap saw b's message as the wire brought it (the upstream sid, 2), and no btc.
        #expect(await tap.wait { $0 == "MSG prices.eth 2 7\r\n{\"n\":1}\r\n" } != nil, "\(tap.client.lines.text)")
        #expect(!tap.texts().contains { $0.contains("prices.btc") })
        tap.close()

        // 20 server restarts: the subscriptions come back with the apps' sids, the apps do nothing.
        for restart in 1...20 {
            await server.stop()
            let mark = p.mark
            server = try await NATSServer.start(dir, websocket: server.websocket, monitor: server.monitor)
            guard await p.client.lines.wait(from: mark, { $0.contains(#""type":"state""#) && $0.contains(#""state":"open""#) }) != nil else {
                throw TestFailure("restart \(restart): the link did not open again: \(daemon.stderr.text.suffix(2000))")
            }
            let marks = (a.mark, b.mark, c.mark)
            Self.publish(p, "prices.btc", #"{"n":\#(restart + 1)}"#, request: "pb\(restart)")
            Self.publish(p, "prices.eth", #"{"n":\#(restart + 1)}"#, request: "pe\(restart)")
            for (app, mark, subject, sid) in [(a, marks.0, "prices.btc", "1"), (b, marks.1, "prices.eth", "1"), (c, marks.2, "prices.btc", "7")] {
                let text = await app.wait(from: mark) { $0.hasPrefix("MSG \(subject) ") }
                #expect(text?.hasPrefix("MSG \(subject) \(sid) ") == true, "restart \(restart): \(String(describing: text))")
            }
        }
        #expect(try server.subjects() == ["prices.btc", "prices.eth"])
        for (name, app) in [("a", a), ("b", b), ("c", c)] {
            let numbers = app.texts().compactMap { text -> Int? in
                guard let body = text.split(separator: "\r\n").dropFirst().first else { return nil }
                return (try? JSONValue.parse(String(body)))?["n"]?.intValue
            }
            print(
                "nats 20 restarts: \(name): \(numbers.count) messages, numbered \(numbers.first ?? 0)...\(numbers.last ?? 0), none missing: \(numbers == Array(1...21))"
            )
            #expect(numbers == Array(1...21))
        }
        // The subject two apps share stays until the second leaves; then the server has it no more.
        c.close()
        b.close()
        try await eventually("the server's subjects to be prices.btc alone", { try server.subjects() }, until: { $0 == ["prices.btc"] })
        a.close()
        try await eventually("the server to have no subject", { try server.subjects() }, until: \.isEmpty)
    }

    /// nats-server answers a SUB its user may not make with `-ERR 'Permissions Violation for
    /// Subscription to "…"'` and keeps the connection: the subscription never started. It is set
    /// aside at once (its holder told), never sent again on a later open, and the other app's
    /// subscription flows on, the link never down.
    @Test func aSubscriptionTheServerRefusesIsSetAsideAndTheOthersFlowOn() async throws {
        let dir = try TemporaryDirectory()
        let server = try await NATSServer.start(
            dir,
            extra: #"authorization { users = [ { user: "app", password: "pw", permissions: { subscribe: { deny: ["secret.>"] } } } ] }"#)
        defer { server.process.stop() }
        let (daemon, socket) = try await protocolDaemon(dir, url: Self.url(server), protocol: "nats", settings: "user = \"app\"\npass = \"pw\"")
        defer { daemon.stop() }
        let good = try await TextApp.connect(socket, "good", of: daemon)
        let bad = try await TextApp.connect(socket, "bad", of: daemon)
        good.send("SUB news 1\r\n", request: "g")
        #expect(await good.client.reply("g")?["ok"] == true)
        let mark = bad.mark
        bad.send("SUB secret.x 1\r\n", request: "b")
        #expect(await bad.client.reply("b")?["ok"] == true)
        // Its holder is told, under its sid, why it is set aside.
        let told = await bad.wait(from: mark) { $0.contains("Wsbridged-Error: set aside: the server refused it") }
        #expect(told?.contains("Permissions Violation for Subscription to") == true, "\(bad.client.lines.text.suffix(2000))")
        func subscriptions(_ status: JSONValue?) -> [JSONValue] {
            guard case .array(let list)? = status?.value(at: "result.protocol.subscriptions") else { return [] }
            return list
        }
        let status = try await eventually(
            "the refusal in status", { await good.status() }, until: { subscriptions($0).contains { $0["set_aside"] != nil } })
        let subscriptions = subscriptions(status)
        #expect(subscriptions.filter { $0["set_aside"] != nil }.map { $0["key"] } == ["secret.x"], "\(subscriptions)")
        #expect(status?.value(at: "result.reconnects") == 0)
        // The other app's subscription flows, on the same connection.
        let before = good.mark
        Self.publish(good, "news", #"{"n":1}"#, request: "p1")
        #expect(await good.wait(from: before) { $0 == "MSG news 1 7\r\n{\"n\":1}\r\n" } != nil, "\(good.client.lines.text.suffix(1000))")
        // A new connection sends the working one again, not the refused one.
        let reopened = good.mark
        good.client.send(#"{"id":"r","op":"reconnect"}"#)
        #expect(await good.client.reply("r")?["ok"] == true)
        #expect(await good.client.lines.wait(from: reopened) { $0.contains(#""type":"state""#) && $0.contains(#""state":"open""#) } != nil)
        let after = good.mark
        Self.publish(good, "news", #"{"n":2}"#, request: "p2")
        #expect(await good.wait(from: after) { $0 == "MSG news 1 7\r\n{\"n\":2}\r\n" } != nil)
        #expect(try server.subjects() == ["news"])
        // The server's -ERR reached every subscriber once: the refused SUB went on one connection only.
        let violations = good.texts().filter { $0.hasPrefix("-ERR") && $0.contains("Permissions Violation for Subscription") }
        #expect(violations.count == 1, "\(violations)")
    }

    @Test func aRequestIsAnsweredThroughTheDaemonsInboxToItsOwnApp() async throws {
        let dir = try TemporaryDirectory()
        let server = try await NATSServer.start(dir)
        defer { server.process.stop() }
        let (daemon, socket) = try await protocolDaemon(dir, url: Self.url(server), protocol: "nats")
        defer { daemon.stop() }
        let responder = try await TextApp.connect(socket, "responder", of: daemon)
        responder.send("SUB svc.add 1\r\n", request: "s")
        #expect(await responder.client.reply("s")?["ok"] == true)
        let q1 = try await TextApp.connect(socket, "q1", of: daemon)
        let q2 = try await TextApp.connect(socket, "q2", of: daemon)
        // Both ask with the same reply subject; the responder answers each on the subject it saw.
        async let one = q1.request("PUB svc.add rep 5\r\n[1,2]\r\n", id: "r1")
        async let two = q2.request("PUB svc.add rep 7\r\n[10,20]\r\n", id: "r2")
        _ = await responder.client.lines.wait(count: 2) { $0.contains("MSG svc.add ") }
        for (answered, asked) in responder.texts().filter({ $0.hasPrefix("MSG svc.add ") }).enumerated() {
            let words = asked.split(separator: "\r\n")[0].split(separator: " ")
            let numbers = try JSONValue.parse(String(asked.split(separator: "\r\n")[1]))
            guard case .array(let n) = numbers else { continue }
            let sum = "\((n[0].intValue ?? 0) + (n[1].intValue ?? 0))"
            #expect(words[3].hasPrefix("_INBOX.wsbridged-"), "the reply subject is the daemon's inbox: \(asked)")
            responder.send("PUB \(words[3]) \(sum.utf8.count)\r\n\(sum)\r\n", request: "answer\(answered)")
        }
        let (r1, r2) = await (one, two)
        #expect(r1?.value(at: "result.json.payload") == "3" && r1?.value(at: "result.json.subject") == "rep", "\(String(describing: r1))")
        #expect(r2?.value(at: "result.json.payload") == "30" && r2?.value(at: "result.json.subject") == "rep", "\(String(describing: r2))")
        // A request in flight when the link drops: link_lost at once.
        responder.send("SUB svc.slow 2\r\n", request: "s2")
        #expect(await responder.client.reply("s2")?["ok"] == true)
        q1.client.send(#"{"id":"slow","op":"request","text":"PUB svc.slow rep 0\r\n\r\n","timeout":120}"#)
        // The responder got it (and never answers): the request is in flight.
        #expect(await responder.wait { $0.hasPrefix("MSG svc.slow 2 _INBOX.wsbridged-") } != nil)
        await server.stop()
        #expect(await q1.client.reply("slow")?.value(at: "error.code") == "link_lost")
    }

    @Test func theLinkIdlesPastThreeTimesTheServersStaleDeadline() async throws {
        let dir = try TemporaryDirectory()
        // The server pings every second and drops a connection after 2 unanswered: the daemon answers.
        let server = try await NATSServer.start(dir, trace: true)
        defer { server.process.stop() }
        let (daemon, socket) = try await protocolDaemon(dir, url: Self.url(server), protocol: "nats")
        defer { daemon.stop() }
        let pongs = await server.process.stderr.wait(count: 7, timeout: .seconds(30)) { $0.contains("<<- [PONG]") }
        #expect(pongs.count == 7, "\(server.process.stderr.text.suffix(2000))")
        #expect(!server.process.stderr.text.contains("Stale Connection"))
        let app = try await TextApp.connect(socket, "a", of: daemon)
        #expect(await app.status()?.value(at: "result.reconnects") == 0)
        app.send("PING\r\n", request: "ping")
        #expect(await app.wait { $0 == "PONG\r\n" } != nil)
    }
}
