import Foundation
import Testing
import WSBridgeCore
import WSBridgeProtocol

/// A private RabbitMQ node (Debian's rabbitmq-server) with its Web STOMP plugin on loopback: its
/// own node name, ports and data under the test's directory, owned by the rabbitmq user the
/// server runs as.
struct RabbitMQNode {
    let dir: String
    let node: String
    let stomp: Int
    let dist: Int
    let process: ManagedProcess

    /// Starts one. Without `stomp`, on free ports (again on others while a parallel test's
    /// server takes one first); with it (a restart), on those; up once its own Web STOMP
    /// listener is there (start-up takes some seconds).
    static func start(_ test: TemporaryDirectory, stomp: Int? = nil, dist: Int? = nil, node: String? = nil) async throws -> RabbitMQNode {
        try await startListening("rabbitmq-server", on: stomp, timeout: .seconds(60), every: .milliseconds(100)) { port in
            try Self.launch(test, stomp: port, dist: try dist ?? freePort(), node: node)
        }.0
    }

    private static func launch(_ test: TemporaryDirectory, stomp: Int, dist: Int, node: String?) throws -> RabbitMQNode {
        let dir = test.file("rabbitmq")
        let node = node ?? "wsbt-\(getpid())-\(stomp)@localhost"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        // A restart's node writes its own: until then the last one's pid is no one's.
        try? FileManager.default.removeItem(atPath: "\(dir)/pid")
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
        return RabbitMQNode(dir: dir, node: node, stomp: stomp, dist: dist, process: process)
    }

    /// The Erlang VM's pid, from its pid file (written early in its start-up).
    var pid: Int32? {
        guard let text = try? String(contentsOfFile: "\(self.dir)/pid", encoding: .utf8) else { return nil }
        return Int32(text.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// The consumers on the node (`rabbitmqctl list_consumers`): one per upstream subscription.
    func consumers() throws -> Int { try self.consumerList().count }

    /// `rabbitmqctl list_consumers`' lines, one per consumer (queue, channel, tag, …: tab-separated).
    /// A query that failed throws, with what `rabbitmqctl` said: its empty output is not "none".
    /// Its operation timeout is raised to 120 s: a loaded machine (the full suite beside busy
    /// loops) once made it fail, and the test read that as no consumer.
    func consumerList() throws -> [String] {
        let r = try spawnAndWait("/usr/sbin/rabbitmqctl", ["-n", self.node, "-q", "list_consumers", "--no-table-headers", "--timeout", "120"])
        guard r.status == 0 else { throw TestFailure("rabbitmqctl list_consumers on \(self.node) exited \(r.status): \(r.stderr.suffix(1000))") }
        return r.stdout.split(separator: "\n").map(String.init).filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
    }

    /// Kills the server process (the Erlang VM, from its pid file) and waits for it to go.
    func kill() async {
        self.stopNow()
        _ = await self.process.waitForExit()
    }

    /// Signals the Erlang VM (from its pid file).
    func signal(_ signal: Int32) {
        if let pid = self.pid { Glibc.kill(pid, signal) }
    }

    /// Stops the Erlang VM (SIGSTOP) and waits until the kernel says it is stopped (its state in
    /// /proc, `T`): a request sent after this finds the broker frozen. Throws, saying which
    /// process it signalled and what it was, when it does not stop.
    func freeze() async throws {
        guard let pid = self.pid else { throw TestFailure("no pid in \(self.dir)/pid to stop") }
        guard Glibc.kill(pid, SIGSTOP) == 0 else { throw TestFailure("kill(\(pid), SIGSTOP): \(String(cString: strerror(errno)))") }
        func state() -> String {
            // "pid (comm) S ...": the state follows the command's closing parenthesis.
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") else { return "gone" }
            return String(stat[close...].dropFirst(2).prefix(1))
        }
        let stopped = try await eventually("the Erlang VM (pid \(pid)) stopped", timeout: .seconds(30), { state() }, until: { $0 == "T" || $0 == "gone" })
        guard stopped == "T" else {
            let command = (try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8)) ?? "?"
            throw TestFailure("pid \(pid) (\(command.replacingOccurrences(of: "\0", with: " ").prefix(200))) did not stop: state \(stopped)")
        }
    }

    /// Kills the server process (the Erlang VM, from its pid file).
    func stopNow() {
        if let pid = self.pid { Glibc.kill(pid, SIGKILL) }
        self.process.stop()
    }
}

extension RabbitMQNode: PortServer {
    var listenerPID: Int32? { self.pid }
    func stopAndWait() async { await self.kill() }
    var logTail: String { String(self.process.stdout.text.suffix(3000)) }
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
        let a = try await TextApp.connect(socket, "a", of: daemon)
        let b = try await TextApp.connect(socket, "b", of: daemon)
        let c = try await TextApp.connect(socket, "c", of: daemon)
        let p = try await TextApp.connect(socket, "publisher", of: daemon)
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
        let tap = try await TextApp.connect(socket, "tap", of: daemon)
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
        let restored = try node.consumerList()
        #expect(restored.count == 2, "\(restored)")
        // The destination two apps share stays until the second leaves.
        c.close()
        await round(22, "c left", withC: false)
        let consumers = try node.consumerList()
        #expect(consumers.count == 2, "\(consumers); the daemon's log ends: \(daemon.stderr.text.suffix(3000))")
        a.close()
        try await eventually("one consumer on the node", { try node.consumers() }, until: { $0 == 1 })
    }

    @Test func aPoisonSubscriptionsErrorIsSetAsideAndTheOthersFlowAgain() async throws {
        let dir = try TemporaryDirectory()
        let node = try await RabbitMQNode.start(dir)
        defer { node.stopNow() }
        let (daemon, socket) = try await protocolDaemon(dir, url: Self.url(node), protocol: "stomp", settings: Self.settings)
        defer { daemon.stop() }
        let good = try await TextApp.connect(socket, "good", of: daemon)
        let bad = try await TextApp.connect(socket, "bad", of: daemon)
        good.send(Self.subscribe("sub-0", "/topic/a"), request: "g")
        #expect(await good.client.reply("g")?["ok"] == true)
        // RabbitMQ answers a destination it does not know with an ERROR frame and a close.
        let mark = bad.mark
        bad.send(Self.subscribe("sub-0", "/bogus/x"), request: "b")
        let told = await bad.wait(from: mark, timeout: .seconds(60)) { $0.hasPrefix("ERROR\n") && $0.contains(#"wsbridged\c set aside"#) }
        #expect(told?.contains("receipt-id:sub-0") == true, "\(bad.client.lines.text.suffix(3000))")
        // The link is up for the other app again, and stays up.
        let status = try await eventually("the link open again", { await good.status() }, until: { $0?.value(at: "result.state") == "open" })
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
        // Heart-beats every 2 s both ways; the broker drops a client silent for twice that, and
        // the daemon a broker. (At 1 s, a machine busy enough, the suite beside two busy loops,
        // once delayed a heart-beat past the other side's 2 s: a reconnect. The margin is 2 s now.)
        let settings = "login = \"guest\"\npasscode = \"guest\"\nheart_beat = \"2000,2000\""
        let (daemon, socket) = try await protocolDaemon(dir, url: Self.url(node), protocol: "stomp", settings: settings)
        defer { daemon.stop() }
        let app = try await TextApp.connect(socket, "a", of: daemon)
        let first = await app.status()?.value(at: "result.messages_in")?.intValue ?? 0
        // The broker's heart-beats arrive as messages: 7 more is 14 s on one link, past 3 × 4 s.
        let status = try await eventually(
            "7 more heart-beats on one link", timeout: .seconds(60), { await app.status() },
            until: { ($0?.value(at: "result.messages_in")?.intValue ?? 0) >= first + 7 })
        #expect(status?.value(at: "result.reconnects") == 0 && status?.value(at: "result.state") == "open")
        // The broker freezes (its socket open, its heart-beats stopped) with a request in flight:
        // the daemon's heart-beat deadline ends the link, and the request gets link_lost at once.
        defer { node.signal(SIGCONT) }
        try await node.freeze()
        let reply = await app.request("SEND\ndestination:/topic/x\nreceipt:r-9\n\nhi\0", id: "frozen", timeout: 120)
        #expect(
            reply?.value(at: "error.code") == "link_lost",
            "\(String(describing: reply)); the daemon is \(daemon.isRunning ? "running" : "gone"), its log ends: \(daemon.stderr.text.suffix(3000))")
        // Why, as status says it (set before the link's requests were answered link_lost).
        let after = await app.status()
        #expect(
            after?.value(at: "result.last_error")?.stringValue?.contains("past the keepalive deadline the server set") == true,
            "\(String(describing: after))")
    }
}
