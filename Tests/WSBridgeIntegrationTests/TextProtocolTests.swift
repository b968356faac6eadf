import Foundation
import Testing
import WSBridgeCore
import WSBridgeProtocol

/// An app of a text protocol (Socket.IO, STOMP, NATS) on the daemon's socket: it sends the
/// protocol's own text and reads the wire text of what comes to it (issue 34).
struct TextApp {
    let client: SocketClient

    static func connect(_ socket: String, _ name: String) async throws -> TextApp {
        let c = try SocketClient(path: socket, name: name)
        guard await c.lines.wait(containing: "\"type\":\"hello\"") != nil else { throw TestFailure("no hello") }
        return TextApp(client: c)
    }

    /// `send` of `text` (`sticky`: a sticky send under that key, `leave` its on_unstick).
    func send(_ text: String, request: String, sticky: String? = nil, leave: String? = nil) {
        var line: JSONValue = ["id": .string(request), "op": "send", "text": .string(text)]
        if let sticky { line = line.setting("sticky", to: .string(sticky)) }
        if let leave { line = line.setting("on_unstick", to: .string(leave)) }
        self.client.send(line.serialized)
    }

    /// `request` of `text`, answered by what carries its id; the reply.
    func request(_ text: String, id: String, timeout: Int = 20) async -> JSONValue? {
        let line: JSONValue = ["id": .string(id), "op": "request", "text": .string(text), "timeout": .number(JSONNumber(timeout))]
        self.client.send(line.serialized)
        return await self.client.reply(id, timeout: .seconds(Int64(timeout) + 10))
    }

    var mark: Int { self.client.lines.count }

    /// The wire texts of the messages received, from `from` on.
    func texts(from: Int = 0) -> [String] {
        self.client.lines.lines.dropFirst(from).compactMap { line in
            guard let m = try? JSONValue.parse(line), m["type"] == "message" else { return nil }
            return m["data"]?.stringValue
        }
    }

    /// Waits for a message whose wire text satisfies `predicate`.
    func wait(from: Int = 0, timeout: Duration = .seconds(20), _ predicate: @escaping @Sendable (String) -> Bool) async -> String? {
        let line = await self.client.lines.wait(from: from, timeout: timeout) { line in
            guard let m = try? JSONValue.parse(line), m["type"] == "message", let data = m["data"]?.stringValue else { return false }
            return predicate(data)
        }
        return line.flatMap { try? JSONValue.parse($0) }?["data"]?.stringValue
    }

    func status() async -> JSONValue? {
        let id = "st\(self.mark)"
        self.client.send(#"{"id":"\#(id)","op":"status"}"#)
        return await self.client.reply(id)
    }

    func close() { self.client.close() }
}

/// `upstream.protocol = "socketio"` against python-socketio 5 on aiohttp (Tests/peers/socketio_peer.py).
@Suite(.serialized) struct SocketIOProtocolTests {
    static func peer(port: Int = 0, _ arguments: [String] = []) async throws -> (ManagedProcess, Int) {
        try await pythonPeer("socketio_peer.py", port: port, arguments)
    }

    static func url(_ port: Int) -> String { "ws://127.0.0.1:\(port)/socket.io/?EIO=4&transport=websocket" }

    static func ticks(_ texts: [String]) -> [Int] {
        texts.compactMap { text -> Int? in
            guard text.hasPrefix("42"), case .array(let items)? = try? JSONValue.parse(String(text.dropFirst(2))), items.count == 2, items[0] == "tick"
            else { return nil }
            return items[1]["n"]?.intValue
        }
    }

    @Test func twoAppsOnAckIdOneGetTheirOwnAcksAndTheirRoomSurvivesServerRestarts() async throws {
        let dir = try TemporaryDirectory()
        var (peer, port) = try await Self.peer()
        defer { peer.stop() }
        let (daemon, socket) = try await protocolDaemon(dir, url: Self.url(port), protocol: "socketio")
        defer { daemon.stop() }
        let a = try await TextApp.connect(socket, "a")
        let b = try await TextApp.connect(socket, "b")
        // Both emit with ack id 1, five rounds: each gets its own sum under its own id.
        for round in 0..<5 {
            a.send(#"421["add",10,\#(round)]"#, request: "a\(round)")
            b.send(#"421["add",1000,\#(round)]"#, request: "b\(round)")
            #expect(await a.wait { $0 == "431[\(10 + round)]" } != nil, "\(a.client.lines.text)")
            #expect(await b.wait { $0 == "431[\(1000 + round)]" } != nil, "\(b.client.lines.text)")
        }
        #expect(!a.texts().contains { $0.hasPrefix("431[100") } && !b.texts().contains { $0 == "431[10]" })
        // `request` without match: answered by the ack with its id.
        let answer = await a.request(#"427["add",2,3]"#, id: "r")
        #expect(answer?.value(at: "result.json.args") == [5], "\(String(describing: answer))")
        #expect(answer?.value(at: "result.json.id") == 7)

        // A room is the server's own event: both apps keep it with the same sticky send, which
        // goes upstream once; both get its ticks.
        for (app, name) in [(a, "a"), (b, "b")] {
            app.send(#"42["join","room-a"]"#, request: "j\(name)", sticky: "room-a", leave: #"42["leave","room-a"]"#)
            #expect(await app.client.reply("j\(name)")?["ok"] == true)
        }
        #expect(await peer.stdout.wait { $0 == "members room-a 1" } != nil)
        for app in [a, b] { #expect(await app.wait { $0.hasPrefix(#"42["tick""#) } != nil) }
        #expect(peer.stdout.lines.filter { $0 == "join room-a" }.count == 1)
        // Filters read the view: {"type":"event","namespace":"/","event":"tick","args":[{…}]}.
        let watcher = try await TextApp.connect(socket, "watcher")
        watcher.client.send(#"{"id":"f","op":"subscribe","filter":{"field":"event","equals":"tick"}}"#)
        #expect(await watcher.client.reply("f")?["ok"] == true)
        let seen = await watcher.client.lines.wait { $0.contains(#""type":"message""#) }
        #expect(seen?.contains(#"42[\"tick\""#) == true, "\(String(describing: seen))")
        watcher.close()

        // The server restarts 20 times: the room is joined again on every open, ticks flow, and
        // the apps did nothing.
        for restart in 1...20 {
            peer.stop()
            _ = await peer.waitForExit()
            let marks = (a.mark, b.mark)
            (peer, _) = try await Self.peer(port: port)
            #expect(await peer.stdout.wait { $0 == "join room-a" } != nil, "restart \(restart): \(daemon.stderr.text.suffix(2000))")
            for (app, mark) in [(a, marks.0), (b, marks.1)] {
                #expect(await app.wait(from: mark) { $0.hasPrefix(#"42["tick""#) } != nil, "restart \(restart)")
            }
        }
        for (name, app) in [("a", a), ("b", b)] {
            let numbers = Self.ticks(app.texts())
            let (lost, duplicated) = lostAndDuplicated(numbers)
            print("socketio 20 restarts: \(name): \(numbers.count) ticks, \(lost) lost, \(duplicated) duplicated within connections")
            #expect(lost == 0 && duplicated == 0)
        }
        // The first holder leaves: still joined; the last: the server sees the leave.
        a.close()
        let mark = b.mark
        #expect(await b.wait(from: mark) { $0.hasPrefix(#"42["tick""#) } != nil)
        #expect(!peer.stdout.lines.contains("leave room-a"))
        b.close()
        #expect(await peer.stdout.wait { $0 == "leave room-a" } != nil, "\(peer.stdout.text)")
    }

    @Test func theLinkIdlesPastThreeTimesTheServersPingDeadline() async throws {
        let dir = try TemporaryDirectory()
        // pingInterval + pingTimeout = 1.5 s (the open packet gives the interval in whole
        // seconds): the server drops a client that misses one answer.
        let (peer, port) = try await Self.peer(port: 0, ["--ping-interval", "1", "--ping-timeout", "0.5"])
        defer { peer.stop() }
        let (daemon, socket) = try await protocolDaemon(dir, url: Self.url(port), protocol: "socketio")
        defer { daemon.stop() }
        // Five pongs: 5 s on one connection, past 3 × the 1.5 s deadline, nothing from apps.
        let pongs = await peer.stdout.wait(count: 5, timeout: .seconds(30)) { $0 == "pong" }
        #expect(pongs.count == 5)
        #expect(
            peer.stdout.lines.filter { $0.hasPrefix("connected ") }.count == 1 && !peer.stdout.lines.contains { $0.hasPrefix("disconnected") },
            "\(daemon.stderr.text.suffix(3000))")
        let app = try await TextApp.connect(socket, "a")
        #expect(await app.status()?.value(at: "result.reconnects") == 0)
        // An app's own handshake and pings are answered here, never forwarded.
        app.send("40", request: "h")
        #expect(await app.wait { $0.hasPrefix(#"40{"sid":"#) } != nil)
        #expect(peer.stdout.lines.filter { $0.hasPrefix("connected ") }.count == 1)
        // A server that stops pinging (frozen: its socket stays open, the WebSocket heartbeat's
        // deadline is far off): the daemon drops the link once the server's own deadline passed.
        let mark = app.mark
        peer.signal(SIGSTOP)
        defer { peer.signal(SIGCONT) }
        let down = await app.client.lines.wait(from: mark) { $0.contains(#""type":"state""#) && !$0.contains(#""state":"open""#) }
        #expect(down?.contains("past the keepalive deadline the server set") == true, "\(String(describing: down))")
    }

    @Test func anEmitInFlightWhenTheLinkDropsGetsLinkLostAtOnce() async throws {
        let dir = try TemporaryDirectory()
        let (peer, port) = try await Self.peer()
        defer { peer.stop() }
        let (daemon, socket) = try await protocolDaemon(dir, url: Self.url(port), protocol: "socketio")
        defer { daemon.stop() }
        let a = try await TextApp.connect(socket, "a")
        a.client.send(#"{"id":"slow","op":"request","text":"429[\"slow\",60]","timeout":120}"#)
        #expect(await peer.stdout.wait { $0 == "call slow" } != nil)
        peer.stop()
        let reply = await a.client.reply("slow")
        #expect(reply?.value(at: "error.code") == "link_lost", "\(String(describing: reply))")
    }

    @Test func aNamespaceTheServerRefusesIsInStatusAndTheLinkBacksOff() async throws {
        let dir = try TemporaryDirectory()
        let (peer, port) = try await Self.peer(port: 0, ["--token", "right"])
        defer { peer.stop() }
        let socket = dir.file("d.sock")
        let token = try dir.write("token", "wrong\n")
        let config = try writeDaemonConfig(
            dir, "wsbridged", url: Self.url(port), socket: socket, upstream: "protocol = \"socketio\"",
            extra: "[auth]\ntoken_file = \"\(token)\"\n[protocol]\nauth = '{\"token\":\"${token}\"}'")
        let daemon = try ManagedProcess.daemon(["--config", config])
        defer { daemon.stop() }
        guard await daemon.awaitReady() else { throw TestFailure("no socket: \(daemon.stderr.text)") }
        let app = try await TextApp.connect(socket, "a")
        var status: JSONValue?
        for _ in 0..<200 {
            status = await app.status()
            if status?.value(at: "result.failed_attempts")?.intValue ?? 0 >= 3 { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(
            status?.value(at: "result.protocol.server_error")?.stringValue?.contains("refused namespace / (44): not authorized") == true,
            "\(String(describing: status))")
        #expect(status?.value(at: "result.last_error")?.stringValue?.contains("not authorized") == true)
        #expect(status?.value(at: "result.state") != "open")
    }
}

/// Debian's nats-server with a WebSocket listener on loopback, its monitoring port for the
/// server's own view of the subscriptions.
struct NATSServer {
    let process: ManagedProcess
    let websocket: Int
    let monitor: Int

    /// Starts one (ports 0: any, found in its log); `trace`: every protocol operation logged.
    static func start(_ dir: TemporaryDirectory, websocket: Int = 0, monitor: Int = 0, trace: Bool = false) async throws -> NATSServer {
        func port(_ p: Int) -> String { p == 0 ? "-1" : "\(p)" }
        let config = try dir.write(
            "nats.conf",
            """
            listen: "127.0.0.1:-1"
            http: "127.0.0.1:\(port(monitor))"
            ping_interval: "1s"
            ping_max: 2
            websocket { listen: "127.0.0.1:\(port(websocket))", no_tls: true }
            """)
        let process = try ManagedProcess("/usr/sbin/nats-server", ["-c", config] + (trace ? ["-V"] : []), name: "nats-server")
        guard let ws = await process.stderr.wait(containing: "Listening for websocket clients on ws://127.0.0.1:"),
            let http = process.stderr.lines.first(where: { $0.contains("Starting http monitor on 127.0.0.1:") }),
            let wsPort = Int(ws.split(separator: ":").last ?? ""), let httpPort = Int(http.split(separator: ":").last ?? "")
        else {
            process.stop()
            throw TestFailure("nats-server did not start: \(process.stderr.text)")
        }
        return NATSServer(process: process, websocket: wsPort, monitor: httpPort)
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
        let a = try await TextApp.connect(socket, "a")
        let b = try await TextApp.connect(socket, "b")
        let c = try await TextApp.connect(socket, "c")
        let p = try await TextApp.connect(socket, "publisher")
        a.send("SUB prices.btc 1\r\n", request: "sa")
        b.send("SUB prices.eth 1\r\n", request: "sb")
        c.send("SUB prices.btc 7\r\n", request: "sc")
        for (app, id) in [(a, "sa"), (b, "sb"), (c, "sc")] { #expect(await app.client.reply(id)?["ok"] == true) }
        // One upstream subscription per subject, whatever the apps' sids.
        #expect(try server.subjects() == ["prices.btc", "prices.eth"])
        // The operator's view of the wire, selected by subject on the views.
        let tap = try await TextApp.connect(socket, "tap")
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
        var subjects: [String] = []
        for _ in 0..<100 {
            subjects = try server.subjects()
            if subjects == ["prices.btc"] { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(subjects == ["prices.btc"])
        a.close()
        for _ in 0..<100 {
            subjects = try server.subjects()
            if subjects.isEmpty { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(subjects.isEmpty)
    }

    @Test func aRequestIsAnsweredThroughTheDaemonsInboxToItsOwnApp() async throws {
        let dir = try TemporaryDirectory()
        let server = try await NATSServer.start(dir)
        defer { server.process.stop() }
        let (daemon, socket) = try await protocolDaemon(dir, url: Self.url(server), protocol: "nats")
        defer { daemon.stop() }
        let responder = try await TextApp.connect(socket, "responder")
        responder.send("SUB svc.add 1\r\n", request: "s")
        #expect(await responder.client.reply("s")?["ok"] == true)
        let q1 = try await TextApp.connect(socket, "q1")
        let q2 = try await TextApp.connect(socket, "q2")
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
        let app = try await TextApp.connect(socket, "a")
        #expect(await app.status()?.value(at: "result.reconnects") == 0)
        app.send("PING\r\n", request: "ping")
        #expect(await app.wait { $0 == "PONG\r\n" } != nil)
    }
}

/// A private RabbitMQ node (Debian's rabbitmq-server) with its Web STOMP plugin on loopback: its
/// own node name, ports and data under the test's directory, owned by the rabbitmq user the
/// server runs as.
struct RabbitMQNode {
    let dir: String
    let node: String
    let stomp: Int
    let dist: Int
    let process: ManagedProcess

    static func start(_ test: TemporaryDirectory, stomp: Int? = nil, dist: Int? = nil, node: String? = nil) async throws -> RabbitMQNode {
        let dir = test.file("rabbitmq")
        let stomp = try stomp ?? freePort()
        let dist = try dist ?? freePort()
        let node = node ?? "wsbt-\(getpid())-\(stomp)@localhost"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try """
        listeners.tcp = none
        stomp.listeners.tcp = none
        web_stomp.tcp.port = \(stomp)
        web_stomp.tcp.ip = 127.0.0.1
        loopback_users = none
        """.write(toFile: "\(dir)/rabbitmq.conf", atomically: true, encoding: .utf8)
        try "[rabbitmq_web_stomp].\n".write(toFile: "\(dir)/enabled_plugins", atomically: true, encoding: .utf8)
        _ = try spawnAndWait("/bin/chmod", ["755", test.path])
        _ = try spawnAndWait("/bin/chown", ["-R", "rabbitmq:rabbitmq", dir])
        let environment = [
            "RABBITMQ_NODENAME": node, "RABBITMQ_MNESIA_BASE": "\(dir)/mnesia", "RABBITMQ_LOG_BASE": "\(dir)/log",
            "RABBITMQ_CONFIG_FILE": "\(dir)/rabbitmq", "RABBITMQ_ENABLED_PLUGINS_FILE": "\(dir)/enabled_plugins", "RABBITMQ_PID_FILE": "\(dir)/pid",
            "RABBITMQ_DIST_PORT": "\(dist)", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/var/lib/rabbitmq",
        ]
        let process = try ManagedProcess("/usr/sbin/rabbitmq-server", [], environment: environment, name: "rabbitmq")
        let server = RabbitMQNode(dir: dir, node: node, stomp: stomp, dist: dist, process: process)
        // Up once its Web STOMP port takes connections (start-up takes some seconds).
        for _ in 0..<600 {
            if (try? spawnAndWait("/usr/bin/curl", ["-s", "-o", "/dev/null", "http://127.0.0.1:\(stomp)/"]))?.status == 0 { return server }
            try await Task.sleep(for: .milliseconds(100))
        }
        await server.kill()
        throw TestFailure("rabbitmq-server did not start: \(process.stdout.text.suffix(3000))")
    }

    /// The consumers on the node (`rabbitmqctl list_consumers`): one per upstream subscription.
    func consumers() throws -> Int {
        let r = try spawnAndWait("/usr/sbin/rabbitmqctl", ["-n", self.node, "-q", "list_consumers", "--no-table-headers"])
        return r.stdout.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }.count
    }

    /// Kills the server process (the Erlang VM, from its pid file) and waits for it to go.
    func kill() async {
        self.stopNow()
        _ = await self.process.waitForExit()
    }

    /// Signals the Erlang VM (from its pid file).
    func signal(_ signal: Int32) {
        if let text = try? String(contentsOfFile: "\(self.dir)/pid", encoding: .utf8), let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
            Glibc.kill(pid, signal)
        }
    }

    /// Kills the server process (the Erlang VM, from its pid file).
    func stopNow() {
        if let text = try? String(contentsOfFile: "\(self.dir)/pid", encoding: .utf8), let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
            Glibc.kill(pid, SIGKILL)
        }
        self.process.stop()
    }
}

/// `upstream.protocol = "stomp"` against RabbitMQ 3.10's Web STOMP (a private node).
@Suite(.serialized) struct STOMPProtocolTests {
    static func url(_ node: RabbitMQNode) -> String { "ws://127.0.0.1:\(node.stomp)/ws" }

    static func subscribe(_ id: String, _ destination: String) -> String { "SUBSCRIBE\nid:\(id)\ndestination:\(destination)\n\n\0" }

    static func send(_ destination: String, _ body: String) -> String { "SEND\ndestination:\(destination)\ncontent-type:application/json\n\n\(body)\0" }

    static let settings = "login = \"guest\"\npasscode = \"guest\"\nheart_beat = \"1000,1000\""

    /// The `subscription` header and body of a MESSAGE frame.
    static func message(_ text: String) -> (subscription: String, body: String)? {
        guard text.hasPrefix("MESSAGE\n"), let blank = text.range(of: "\n\n") else { return nil }
        let headers = text[..<blank.lowerBound].split(separator: "\n")
        guard let sub = headers.first(where: { $0.hasPrefix("subscription:") }) else { return nil }
        return (String(sub.dropFirst("subscription:".count)), String(text[blank.upperBound...].dropLast()))
    }

    @Test func appsOnSubZeroGetTheirOwnMessagesShareADestinationAndKeepItAcrossServerRestarts() async throws {
        let dir = try TemporaryDirectory()
        var node = try await RabbitMQNode.start(dir)
        defer { node.stopNow() }
        let (daemon, socket) = try await protocolDaemon(dir, url: Self.url(node), protocol: "stomp", settings: Self.settings)
        defer { daemon.stop() }
        let a = try await TextApp.connect(socket, "a")
        let b = try await TextApp.connect(socket, "b")
        let c = try await TextApp.connect(socket, "c")
        let p = try await TextApp.connect(socket, "publisher")
        // stomp.js's first id is sub-0: two apps use it at once; a third shares a's destination.
        a.send(Self.subscribe("sub-0", "/topic/a"), request: "sa")
        b.send(Self.subscribe("sub-0", "/topic/b"), request: "sb")
        c.send(Self.subscribe("s9", "/topic/a"), request: "sc")
        for (app, id) in [(a, "sa"), (b, "sb"), (c, "sc")] { #expect(await app.client.reply(id)?["ok"] == true) }
        // A request (a frame with a receipt) is answered by its RECEIPT: it follows the SUBSCRIBEs.
        let receipt = await p.request("SEND\ndestination:/topic/none\nreceipt:r-1\n\nping\0", id: "r")
        #expect(receipt?.value(at: "result.json.command") == "RECEIPT" && receipt?.value(at: "result.json.headers.receipt-id") == "r-1")
        #expect(try node.consumers() == 2, "one upstream subscription per destination")
        // The operator's view of the wire, selected by destination on the views.
        let tap = try await TextApp.connect(socket, "tap")
        tap.client.send(#"{"id":"t","op":"subscribe","all":true,"filter":{"field":"headers.destination","equals":"/topic/b"}}"#)
        #expect(await tap.client.reply("t")?["ok"] == true)

        func round(_ n: Int, _ label: String, withC: Bool = true) async {
            let marks = (a.mark, b.mark, c.mark)
            p.send(Self.send("/topic/a", #"{"n":\#(n)}"#), request: "pa\(n)")
            p.send(Self.send("/topic/b", #"{"n":\#(n)}"#), request: "pb\(n)")
            for (app, mark, id) in [(a, marks.0, "sub-0"), (b, marks.1, "sub-0")] + (withC ? [(c, marks.2, "s9")] : []) {
                let text = await app.wait(from: mark) { $0.contains("\"n\":\(n)}") }
                #expect(text.flatMap(Self.message)?.subscription == id, "\(label): \(String(describing: text))")
            }
        }
        await round(1, "first")
        #expect(!a.texts().contains { $0.contains("destination:/topic/b") } && !b.texts().contains { $0.contains("destination:/topic/a") })
        #expect(await tap.wait { $0.hasPrefix("MESSAGE\nsubscription:2\ndestination:/topic/b\n") } != nil, "\(tap.client.lines.text)")
        #expect(!tap.texts().contains { $0.contains("destination:/topic/a") })
        tap.close()

        // 20 restarts of the server process: every subscription flows again, the apps do nothing.
        for restart in 1...20 {
            await node.kill()
            let mark = p.mark
            node = try await RabbitMQNode.start(dir, stomp: node.stomp, dist: node.dist, node: node.node)
            guard await p.client.lines.wait(from: mark, timeout: .seconds(60), { $0.contains(#""type":"state""#) && $0.contains(#""state":"open""#) }) != nil
            else {
                throw TestFailure("restart \(restart): the link did not open again: \(daemon.stderr.text.suffix(2000))")
            }
            await round(restart + 1, "restart \(restart)")
        }
        for (name, app) in [("a", a), ("b", b), ("c", c)] {
            let numbers = app.texts().compactMap { Self.message($0) }.compactMap { (try? JSONValue.parse($0.body))?["n"]?.intValue }
            print("stomp 20 restarts: \(name): \(numbers.count) messages, none missing or doubled: \(numbers == Array(1...21))")
            #expect(numbers == Array(1...21))
        }
        #expect(try node.consumers() == 2)
        // The destination two apps share stays until the second leaves.
        c.close()
        await round(22, "c left", withC: false)
        #expect(try node.consumers() == 2)
        a.close()
        var consumers = 2
        for _ in 0..<100 {
            consumers = try node.consumers()
            if consumers == 1 { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(consumers == 1)
    }

    @Test func aPoisonSubscriptionsErrorIsSetAsideAndTheOthersFlowAgain() async throws {
        let dir = try TemporaryDirectory()
        let node = try await RabbitMQNode.start(dir)
        defer { node.stopNow() }
        let (daemon, socket) = try await protocolDaemon(dir, url: Self.url(node), protocol: "stomp", settings: Self.settings)
        defer { daemon.stop() }
        let good = try await TextApp.connect(socket, "good")
        let bad = try await TextApp.connect(socket, "bad")
        good.send(Self.subscribe("sub-0", "/topic/a"), request: "g")
        #expect(await good.client.reply("g")?["ok"] == true)
        // RabbitMQ answers a destination it does not know with an ERROR frame and a close.
        let mark = bad.mark
        bad.send(Self.subscribe("sub-0", "/bogus/x"), request: "b")
        let told = await bad.wait(from: mark, timeout: .seconds(60)) { $0.hasPrefix("ERROR\n") && $0.contains(#"wsbridged\c set aside"#) }
        #expect(told?.contains("receipt-id:sub-0") == true, "\(bad.client.lines.text.suffix(3000))")
        // The link is up for the other app again, and stays up.
        var status: JSONValue?
        for _ in 0..<300 {
            status = await good.status()
            if status?.value(at: "result.state") == "open" { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(status?.value(at: "result.state") == "open", "\(daemon.stderr.text.suffix(2000))")
        #expect(status?.value(at: "result.protocol.server_error")?.stringValue?.contains("Unknown destination") == true, "\(String(describing: status))")
        guard case .array(let subscriptions)? = status?.value(at: "result.protocol.subscriptions") else {
            throw TestFailure("no subscriptions in \(String(describing: status))")
        }
        #expect(subscriptions.filter { $0["set_aside"] != nil }.map { $0["key"] } == ["destination:/bogus/x"])
        let before = good.mark
        good.send(Self.send("/topic/a", #"{"n":1}"#), request: "p")
        #expect(await good.wait(from: before, timeout: .seconds(30)) { $0.contains(#"{"n":1}"#) } != nil, "\(daemon.stderr.text.suffix(2000))")
    }

    @Test func theLinkIdlesPastThreeTimesTheHeartBeatDeadline() async throws {
        let dir = try TemporaryDirectory()
        let node = try await RabbitMQNode.start(dir)
        defer { node.stopNow() }
        // Heart-beats every second both ways; the broker drops a client silent for two.
        let (daemon, socket) = try await protocolDaemon(dir, url: Self.url(node), protocol: "stomp", settings: Self.settings)
        defer { daemon.stop() }
        let app = try await TextApp.connect(socket, "a")
        let first = await app.status()?.value(at: "result.messages_in")?.intValue ?? 0
        // The broker's heart-beats arrive as messages: 7 more is 7 s on one link, past 3 × 2 s.
        var status: JSONValue?
        for _ in 0..<300 {
            status = await app.status()
            if (status?.value(at: "result.messages_in")?.intValue ?? 0) >= first + 7 { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect((status?.value(at: "result.messages_in")?.intValue ?? 0) >= first + 7, "\(String(describing: status))")
        #expect(status?.value(at: "result.reconnects") == 0 && status?.value(at: "result.state") == "open")
        // The broker freezes (its socket open, its heart-beats stopped) with a request in flight:
        // the daemon's heart-beat deadline ends the link, and the request gets link_lost at once.
        node.signal(SIGSTOP)
        defer { node.signal(SIGCONT) }
        let reply = await app.request("SEND\ndestination:/topic/x\nreceipt:r-9\n\nhi\0", id: "frozen", timeout: 120)
        #expect(reply?.value(at: "error.code") == "link_lost", "\(String(describing: reply))")
        // Why, as status says it (set before the link's requests were answered link_lost).
        let after = await app.status()
        #expect(
            after?.value(at: "result.last_error")?.stringValue?.contains("past the keepalive deadline the server set") == true,
            "\(String(describing: after))")
    }
}
