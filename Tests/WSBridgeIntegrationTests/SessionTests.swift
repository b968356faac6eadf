import Foundation
import Testing
import WSBridgeProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// The exchange-style feed of Tests/peers/exchange_feed.py in a child process: a numbered log
/// that survives its own `kill -9` (its start instant is kept in a state file), auth first,
/// resume, per-channel subscriptions.
final class ExchangeFeed {
    let dir: TemporaryDirectory
    let arguments: [String]
    private(set) var process: ManagedProcess
    private(set) var port: Int
    /// Every stdout line of every run, in order.
    private(set) var history: [String] = []

    init(_ dir: TemporaryDirectory, arguments: [String] = []) async throws {
        self.dir = dir
        self.arguments = arguments
        (self.process, self.port) = try await Self.start(dir, arguments + ["--port", "0"])
    }

    private static func start(_ dir: TemporaryDirectory, _ arguments: [String]) async throws -> (ManagedProcess, Int) {
        let p = try ManagedProcess(
            Paths.python, ["-u", "\(Paths.root)/Tests/peers/exchange_feed.py", "--state", dir.file("feed.state")] + arguments, name: "feed")
        guard let line = await p.stdout.wait(timeout: .seconds(30), { $0.hasPrefix("listening ") }), let port = Int(line.dropFirst(10)) else {
            p.stop()
            throw TestFailure("exchange feed did not start: \(p.stderr.text)")
        }
        return (p, port)
    }

    var url: String { "ws://127.0.0.1:\(self.port)/" }

    /// `kill -9`, then the same log on the same port.
    func killAndRestart() async throws {
        self.process.signal(SIGKILL)
        _ = await self.process.waitForExit()
        self.history += self.process.stdout.lines
        (self.process, _) = try await Self.start(self.dir, self.arguments + ["--port", "\(self.port)"])
    }

    func command(_ line: String) { self.process.send(line) }

    /// Every event so far, across restarts.
    var events: [String] { self.history + self.process.stdout.lines }

    /// The requests each connection received, in order (one array per connection).
    var connections: [[String]] {
        var result: [[String]] = []
        for line in self.events {
            if line == "connected" {
                result.append([])
            } else if line.hasPrefix("recv "), !result.isEmpty {
                result[result.count - 1].append(String(line.dropFirst(5)))
            }
        }
        return result
    }

    deinit { self.process.stop() }
}

/// Sessions that survive reconnects (docs/sessions.md): opening messages with the token and the
/// last offset, the ready gate, sticky sends shared by key and scoped to a client or the
/// daemon, and the stream id that tells a consumer the daemon restarted.
@Suite(.serialized) struct SessionTests {
    static let auth = #"{"op":"auth","token":"${token}"}"#
    static let resume = #"{"op":"resume","after":${last:offset}}"#

    static func subscribe(_ channel: String) -> String { #"{"op":"subscribe","channel":"\#(channel)"}"# }
    static func unsubscribe(_ channel: String) -> String { #"{"op":"unsubscribe","channel":"\#(channel)"}"# }

    /// A daemon for `feed`, with the session of an exchange: auth, resume, ready on `authed`.
    static func daemon(
        _ dir: TemporaryDirectory, feed: ExchangeFeed, extra: String = "", upstream: String = "", logLevel: String = "debug",
        onOpen: [String] = [Self.auth, Self.resume]
    ) async throws -> (ManagedProcess, socket: String) {
        let token = try dir.write("token", "t0ken\n")
        let socket = dir.file("wsbridged.sock")
        let config = try writeDaemonConfig(
            dir, "wsbridged", url: feed.url, socket: socket,
            upstream: """
                on_open = [\(onOpen.map { "'\($0)'" }.joined(separator: ", "))]
                ready_when = "type=authed"
                \(upstream)
                [auth]
                token_file = "\(token)"
                """,
            extra: extra)
        let daemon = try ManagedProcess.daemon(["--config", config, "--log-level", logLevel], name: "wsbridged")
        guard await daemon.awaitReady() else {
            daemon.stop()
            throw TestFailure("the daemon did not listen: \(daemon.stderr.text)")
        }
        return (daemon, socket)
    }

    static func client(_ socket: String, name: String) async throws -> SocketClient {
        try await SocketClient.connected(to: socket, name: name)
    }

    static func stick(_ c: SocketClient, id: String, key: String, channel: String, scope: String = "client") async throws -> JSONValue {
        c.send(
            #"{"id":"\#(id)","op":"send","text":\#(JSONValue.string(Self.subscribe(channel)).serialized),"sticky":"\#(key)","scope":"\#(scope)","on_unstick":\#(JSONValue.string(Self.unsubscribe(channel)).serialized)}"#
        )
        guard let reply = await c.reply(id), reply["ok"] == true else { throw TestFailure("sticky \(key) refused: \(c.lines.text)") }
        return reply
    }

    /// The offsets of the feed's messages a client received, in order.
    static func offsets(_ c: SocketClient) -> [Int] {
        c.messages.compactMap { m in m["data"]?.stringValue.flatMap { try? JSONValue.parse($0) }?["offset"]?.intValue }
    }

    /// The 50 cuts of the issue: `kill -9` and restart of the upstream, close 1012, and a TCP
    /// drop without a close, in turn, with two apps holding sticky subscriptions (one key
    /// shared, one each). Every subscription flows again after every reconnect, nothing goes
    /// before `authed`, and each app receives every offset exactly once.
    @Test func fiftyCutsLoseNothingAndRepeatNothing() async throws {
        let dir = try TemporaryDirectory()
        let feed = try await ExchangeFeed(dir, arguments: ["--rate", "300"])
        // The link opens once every key is registered: the first connection's subscriptions go
        // together, as they do after every cut.
        // A queue for 5 minutes of the feed: this process may be kept off the CPU on a busy
        // machine, and a subscriber that falls behind its queue is thinned by design (a
        // `dropped` line); here what is measured is the session's resume, not the queue.
        let (daemon, socket) = try await Self.daemon(dir, feed: feed, extra: "subscriber_queue = 100000", upstream: "connect_on_start = false")
        defer { daemon.stop() }
        // Both apps subscribe (by connecting) before any subscription goes upstream.
        let app1 = try await Self.client(socket, name: "app1")
        let app2 = try await Self.client(socket, name: "app2")
        _ = try await Self.stick(app1, id: "s1", key: "shared", channel: "s")
        let shared = try await Self.stick(app2, id: "s2", key: "shared", channel: "s")
        #expect(shared["result"]?["status"] == "held" && shared.value(at: "result.sticky.holders") == 2)
        _ = try await Self.stick(app1, id: "a1", key: "mine-a", channel: "a")
        _ = try await Self.stick(app2, id: "b2", key: "mine-b", channel: "b")
        app1.send(#"{"id":"c","op":"connect"}"#)
        _ = await app1.reply("c")

        /// Waits until app1 has messages of every channel after line `mark`.
        func flowing(after mark: Int) async -> Bool {
            for channel in ["s", "a", "b"] {
                let seen = await app1.lines.wait(from: mark, timeout: .seconds(30)) { $0.contains(#"\"channel\":\"\#(channel)\""#) }
                if seen == nil { return false }
            }
            return true
        }
        #expect(await flowing(after: 0))
        var openToFirst: [Int64] = []
        for cut in 0..<50 {
            let mark = app1.lines.count
            switch cut % 3 {
            case 0: try await feed.killAndRestart()
            case 1: feed.command("close 1012 service restart")
            default: feed.command("drop")
            }
            guard let open = await app1.lines.wait(from: mark, timeout: .seconds(30), { $0.contains(#""type":"state","state":"open""#) }) else {
                Issue.record("cut \(cut): the link did not open again: \(daemon.stderr.lines.suffix(20))")
                return
            }
            let openIndex = app1.lines.lines.lastIndex(of: open) ?? mark
            #expect(await flowing(after: openIndex), "cut \(cut): not every subscription flows again")
            if let first = app1.lines.lines[openIndex...].first(where: { $0.contains(#""type":"message""#) }),
                let t0 = (try? JSONValue.parse(open))?["ts"]?.intValue, let t1 = (try? JSONValue.parse(first))?["ts"]?.intValue
            {
                openToFirst.append(Int64(t1 - t0))
            }
        }
        let o1 = Self.offsets(app1)
        let o2 = Self.offsets(app2)
        for (name, offsets) in [("app1", o1), ("app2", o2)] {
            let duplicates = offsets.count - Set(offsets).count
            let maxOffset = offsets.max() ?? 0
            let lost = maxOffset - Set(offsets).count
            print("session cuts \(name): 50 cuts, \(offsets.count) messages, offsets 1...\(maxOffset), lost \(lost), duplicates \(duplicates)")
            let exact = offsets == Array(1...max(1, maxOffset))
            #expect(exact, "\(name): every offset exactly once, in order: \(FleetTests.summary(offsets, maxOffset))")
        }
        for app in [app1, app2] {
            #expect(!app.lines.lines.contains { $0.contains(#""type":"dropped""#) }, "\(app.lines.name) fell behind its queue")
        }
        #expect(o1.count > 1000)
        let sorted = openToFirst.sorted()
        if !sorted.isEmpty {
            print(
                "session cuts: open to first message after a cut: min \(sorted[0]) ms, median \(sorted[sorted.count / 2]) ms, max \(sorted[sorted.count - 1]) ms (\(sorted.count) cuts)"
            )
        }
        // Nothing before authed; each of the 51 connections (the first and one per cut): auth,
        // resume, then the three subscriptions once each, in registration order.
        #expect(!feed.events.contains { $0.hasPrefix("violation") }, "\(feed.events.filter { $0.hasPrefix("violation") })")
        let connections = feed.connections
        #expect(connections.count == 51)
        for (i, requests) in connections.enumerated() {
            #expect(requests.count == 5, "connection \(i): \(requests)")
            #expect(requests.first == #"{"op":"auth","token":"t0ken"}"#, "connection \(i): \(requests)")
            #expect(requests.dropFirst().first?.hasPrefix(#"{"op":"resume","after":"#) == true, "connection \(i): \(requests)")
            #expect(Array(requests.dropFirst(2)) == [Self.subscribe("s"), Self.subscribe("a"), Self.subscribe("b")], "connection \(i): \(requests)")
        }

        // Client scope: app1 exits; its own key's leave text goes, the shared key stays.
        let before = feed.events.count
        let beforeClose = feed.process.stdout.count
        app1.close()
        #expect(await feed.process.stdout.wait(from: beforeClose, timeout: .seconds(20)) { $0 == "recv \(Self.unsubscribe("a"))" } != nil)
        #expect(!feed.events[before...].contains("recv \(Self.unsubscribe("s"))"))
        let beforeDrop = feed.process.stdout.count
        feed.command("drop")
        #expect(await feed.process.stdout.wait(from: beforeDrop, timeout: .seconds(20)) { $0 == "recv \(Self.subscribe("b"))" } != nil)
        let requests = feed.connections.last ?? []
        #expect(requests.filter { $0.contains("subscribe") } == [Self.subscribe("s"), Self.subscribe("b")], "\(requests)")
    }

    /// Order on open: opening messages, then (after ready) sticky sends, then queued sends, then new ones.
    @Test func orderOnOpen() async throws {
        let dir = try TemporaryDirectory()
        let feed = try await ExchangeFeed(dir)
        let (daemon, socket) = try await Self.daemon(dir, feed: feed, upstream: "connect_on_start = false")
        defer { daemon.stop() }
        let app = try await Self.client(socket, name: "app")
        app.send(#"{"id":"q1","op":"send","text":"{\"op\":\"note\",\"n\":1}"}"#)
        #expect(await app.reply("q1")?["result"]?["status"] == "queued")
        let sticky = try await Self.stick(app, id: "k", key: "k", channel: "s")
        #expect(sticky["result"]?["status"] == "queued")
        app.send(#"{"id":"c","op":"connect"}"#)
        _ = await app.reply("c")
        _ = await app.lines.wait(timeout: .seconds(20)) { $0.contains(#""state":"open""#) }
        app.send(#"{"id":"q2","op":"send","text":"{\"op\":\"note\",\"n\":2}"}"#)
        #expect(await app.reply("q2")?["result"]?["status"] == "sent")
        _ = await feed.process.stdout.wait(timeout: .seconds(20)) { $0.contains(#""n":2"#) }
        #expect(
            feed.connections.first == [
                #"{"op":"auth","token":"t0ken"}"#, #"{"op":"resume","after":null}"#, Self.subscribe("s"), #"{"op":"note","n":1}"#,
                #"{"op":"note","n":2}"#,
            ])
        // The `authed` message itself reaches subscribers before the `open` state line.
        let lines = app.lines.lines
        let authed = lines.firstIndex { $0.contains(#"{\"type\":\"authed\"}"#) }
        let open = lines.firstIndex { $0.contains(#""state":"open""#) }
        #expect(authed != nil && open != nil && authed! < open!)
    }

    /// No ready message in time: a failed attempt with backoff and a reason, the upstream's last
    /// words shown; the token is in no output, status or metrics, even at trace level.
    @Test func readyTimeoutBacksOffAndSaysWhy() async throws {
        let dir = try TemporaryDirectory()
        let feed = try await ExchangeFeed(dir, arguments: ["--auth-reply", #"{"type":"error","message":"auth service busy"}"#])
        // Auth only: the feed closes a connection that sends anything more before it is authed.
        let (daemon, socket) = try await Self.daemon(dir, feed: feed, upstream: #"ready_timeout = "300ms""#, logLevel: "trace", onOpen: [Self.auth])
        defer { daemon.stop() }
        // Two failed attempts: it backs off and tries again, and says why.
        try await awaitStatus(socket, "two attempts not ready") { $0.failedAttempts >= 2 && $0.lastErrorReason == "not_ready" }
        let error = try daemonStatus(socket).lastError ?? ""
        #expect(error.contains("not ready: no upstream message matched") && error.contains("upstream.ready_when") && error.contains("authed"), "\(error)")
        #expect(error.contains("auth service busy"), "\(error)")
        let status = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", socket, "status", "--json"])
        let json = try JSONValue.parse(status.stdout)
        #expect(json["last_error_reason"] == "not_ready")
        #expect(json["state"]?.stringValue != "open")
        let metrics = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", socket, "metrics"]).stdout
        let notReady = metrics.split(separator: "\n").first { $0.hasPrefix(#"wsbridge_connect_failures_total{reason="not_ready"}"#) }
        #expect(notReady.flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0 >= 1, "\(metrics)")
        let table = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", socket, "status"]).stdout
        // The feed did receive it (so it was sent), but the daemon never says it.
        #expect(feed.events.contains { $0.contains("t0ken") })
        for (what, text) in [("log", daemon.stderr.text + daemon.stdout.text), ("status", status.stdout + table), ("metrics", metrics)] {
            #expect(!text.contains("t0ken"), "the token leaked into the \(what)")
        }
    }

    /// A server that closes the link right after open, because of one sticky send it cannot
    /// take: status and the log name that send's key and holder (the link backs off meanwhile).
    /// A client of `f`, once its test server closes every connection that sends POISON.
    static func poisoned(_ f: DaemonFixture) async throws -> SocketClient {
        let c = try await f.client()
        let before = f.server.mark
        f.server.command("poison POISON")
        // Commands run in order: once `count` answers, the poison is set.
        f.server.command("count")
        #expect(await f.server.event("clients", from: before) != nil)
        return c
    }

    /// Sticks the poison under "bad-key"; the server's mark before it.
    static func stickPoison(_ c: SocketClient, _ f: DaemonFixture) async -> Int {
        let mark = f.server.mark
        c.send(#"{"id":"s","op":"send","text":"{\"op\":\"POISON\"}","sticky":"bad-key"}"#)
        #expect(await c.reply("s")?["ok"] == true)
        return mark
    }

    /// In a pool (one sticky key per connection), a poison key closes its own connection right
    /// after every open: that connection names it, the first (with the good key) stays open and
    /// names nothing.
    @Test func aPoolsConnectionNamesItsOwnCulprit() async throws {
        let f = try await DaemonFixture(upstream: "subscriptions_per_connection = 1\nconnections = 2")
        let c = try await Self.poisoned(f)
        c.send(#"{"id":"g","op":"send","text":"{\"op\":\"GOOD\"}","sticky":"good-key"}"#)
        #expect(await c.reply("g")?["ok"] == true)
        let mark = await Self.stickPoison(c, f)
        // Connection 2 opens, gets the poison, is closed, opens again and gets it again.
        #expect(await f.server.event("message {\"op\":\"POISON\"}", from: mark) != nil)
        let second = f.server.mark
        #expect(await f.server.event("message {\"op\":\"POISON\"}", from: second) != nil)
        try await awaitStatus(f.socket, "connection 2 to name its culprit") { s in
            s.connections?.count == 2 && s.connections?[1].culprit?.contains(#"sticky key "bad-key""#) == true
        }
        let status = try daemonStatus(f.socket)
        #expect(status.connections?[0].culprit == nil && status.connections?[0].state == .open && status.connections?[0].reconnects == 0, "\(status)")
        #expect(status.session?.culprit?.contains("bad-key") == true)
        let table = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", f.socket, "status"]).stdout
        #expect(table.contains("closed right after open") && table.contains("bad-key"), "\(table)")
    }

    @Test func aCloseRightAfterOpenNamesTheStickySendSentLast() async throws {
        let f = try await DaemonFixture()
        let c = try await Self.poisoned(f)
        let mark = await Self.stickPoison(c, f)
        // Closed on that send, and again on the next open, where it is the last one sent.
        #expect(await f.server.event("connected", from: mark) != nil)
        let second = f.server.mark
        #expect(await f.server.event("message {\"op\":\"POISON\"}", from: second) != nil)
        #expect(await f.server.event("connected", from: f.server.mark) != nil)
        let status = try JSONValue.parse(try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", f.socket, "status", "--json"]).stdout)
        let culprit = status.value(at: "session.culprit")?.stringValue ?? ""
        #expect(culprit.contains(#"sticky key "bad-key""#) && culprit.contains("4400") && culprit.contains("POISON"), "\(status)")
        let table = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", f.socket, "status"]).stdout
        #expect(table.contains("culprit") && table.contains("bad-key"), "\(table)")
        // Every such open is a failed attempt, none resets the count: the delays are drawn from
        // windows that double up to backoff.cap, whatever the time (not a loop at base delay).
        var opens = f.server.mark
        for _ in 0..<4 {
            #expect(await f.server.event("connected", from: opens) != nil)
            opens = f.server.mark
        }
        let later = try JSONValue.parse(try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", f.socket, "status", "--json"]).stdout)
        #expect((later["failed_attempts"]?.intValue ?? 0) >= 5, "\(later)")
        // Let go of it: the loop ends.
        c.send(#"{"id":"u","op":"unstick","key":"bad-key"}"#)
        #expect(await c.reply("u")?["ok"] == true)
    }

    /// Daemon scope lasts until unstick, and across `kill -9` with queue.spool set.
    @Test func daemonScopeSurvivesKill9WithTheSpool() async throws {
        let dir = try TemporaryDirectory()
        let feed = try await ExchangeFeed(dir)
        let spool = dir.file("spool")
        let (first, socket) = try await Self.daemon(dir, feed: feed, extra: "[queue]\nspool = \"\(spool)\"")
        guard await first.awaitLink(.open) else { throw TestFailure(first.stderr.text) }
        let app = try await Self.client(socket, name: "app")
        let reply = try await Self.stick(app, id: "d", key: "kept", channel: "a", scope: "daemon")
        #expect(reply["result"]?["status"] == "sent")
        app.close()
        first.signal(SIGKILL)
        _ = await first.waitForExit()
        let mark = feed.process.stdout.count
        let (second, _) = try await Self.daemon(dir, feed: feed, extra: "[queue]\nspool = \"\(spool)\"")
        defer { second.stop() }
        guard await second.awaitLink(.open) else { throw TestFailure(second.stderr.text) }
        #expect(try daemonStatus(socket).session?.stickyKeys == 1)
        #expect(await feed.process.stdout.wait(from: mark, timeout: .seconds(20)) { $0 == "recv \(Self.subscribe("a"))" } != nil)
        let list = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", socket, "sticky", "--json"])
        let keys = try StickyListResult(json: try JSONValue.parse(list.stdout)).keys
        #expect(keys.map(\.key) == ["kept"] && keys.first?.holders.first?.scope == .daemon)
        // unstick: the leave text goes once, and a restart no longer restores it.
        let un = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", socket, "unstick", "kept"])
        #expect(un.stdout.contains("kept removed; its leave text was sent"), "\(un.stdout)\(un.stderr)")
        #expect(await feed.process.stdout.wait(timeout: .seconds(20)) { $0 == "recv \(Self.unsubscribe("a"))" } != nil)
        #expect(try String(contentsOfFile: "\(spool)/sticky.json", encoding: .utf8).contains(#""keys":[]"#))
    }

    /// A daemon restart starts a new stream: a consumer resuming with the old stream and seq is
    /// told `restarted`, never left waiting for a seq that will not come.
    @Test func aRestartIsAnnouncedToAResumingConsumer() async throws {
        let dir = try TemporaryDirectory()
        let feed = try await ExchangeFeed(dir, arguments: ["--rate", "100"])
        var (daemon, socket) = try await Self.daemon(dir, feed: feed)
        let app = try await Self.client(socket, name: "before")
        let hello = try JSONValue.parse(app.lines.lines[0])
        guard let oldStream = hello["stream"]?.stringValue, oldStream.count == 16 else { throw TestFailure("no stream in \(hello)") }
        _ = try await Self.stick(app, id: "k", key: "k", channel: "s", scope: "daemon")
        _ = await app.lines.wait(count: 20, timeout: .seconds(20)) { $0.contains(#""type":"message""#) }
        guard let since = app.messages.last?["seq"]?.intValue else { throw TestFailure("no messages") }
        app.close()
        daemon.signal(SIGTERM)
        #expect(await daemon.waitForExit() == 0)
        (daemon, socket) = try await Self.daemon(dir, feed: feed)
        defer { daemon.stop() }
        guard await daemon.awaitLink(.open) else { throw TestFailure(daemon.stderr.text) }
        let back = try await Self.client(socket, name: "after")
        let newStream = try JSONValue.parse(back.lines.lines[0])["stream"]?.stringValue
        #expect(newStream != nil && newStream != oldStream)
        back.send(#"{"id":"r","op":"subscribe","since":\#(since),"stream":"\#(oldStream)"}"#)
        #expect(await back.reply("r")?["result"]?["stream"]?.stringValue == newStream)
        let gap = await back.lines.wait(timeout: .seconds(20)) { $0.contains(#""type":"gap""#) }.flatMap { try? JSONValue.parse($0) }
        #expect(gap?["reason"] == "restarted" && gap?["since"]?.intValue == since && gap?["stream"]?.stringValue == newStream)
        #expect(gap?["next"] == 1)
        // Without the stream, a since beyond this stream's last seq says the same.
        let plain = try await Self.client(socket, name: "plain")
        plain.send(#"{"id":"p","op":"subscribe","since":1000000}"#)
        // ... in words that claim no restart: all this stream knows is that it has no such seq.
        let plainGap = await plain.lines.wait(timeout: .seconds(20)) { $0.contains(#""reason":"restarted""#) }.flatMap { try? JSONValue.parse($0) }
        #expect(plainGap?["message"]?.stringValue?.hasPrefix("stream \(newStream ?? "?") has no seq 1000000 yet") == true, "\(String(describing: plainGap))")
        // wsbridgectl tail --since --stream prints the notice.
        let tail = try ManagedProcess("\(Paths.bin)/wsbridgectl", ["--socket", socket, "tail", "--since", "\(since)", "--stream", oldStream], name: "tail")
        defer { tail.stop() }
        #expect(await tail.stderr.wait(timeout: .seconds(20)) { $0.contains("wsbridged restarted") } != nil)
        // Without --stream it says what is known.
        let unsure = try ManagedProcess("\(Paths.bin)/wsbridgectl", ["--socket", socket, "tail", "--since", "1000000"], name: "tail-unsure")
        defer { unsure.stop() }
        #expect(
            await unsure.stderr.wait(timeout: .seconds(20)) { $0.contains("has no seq 1000000 yet: wsbridged restarted since, or the seq is wrong") } != nil)
        #expect(!unsure.stderr.text.contains("wsbridged restarted:"))
    }
}
