import Foundation
import Testing
import WSBridgeProtocol

/// The rules a feed sets on each connection (docs/limits.md), against an exchange-style peer that
/// enforces Binance's, scaled down (Tests/peers/ruled_feed.py): a client message over its rate
/// closes the connection with 1008, and it says so on its stdout.
@Suite struct FeedRulesTests {
    /// The feed, and a daemon for it with `limits` in `[upstream.limits]`, its link open.
    static func start(feed arguments: [String], limits: String, upstream: String = "", dir: TemporaryDirectory, awaitOpen: Bool = true) async throws -> (
        feed: ManagedProcess, daemon: ManagedProcess, socket: String
    ) {
        let (feed, port) = try await pythonPeer("ruled_feed.py", port: 0, arguments)
        let socket = dir.file("d.sock")
        let config = try writeDaemonConfig(
            dir, "wsbridged", url: "ws://127.0.0.1:\(port)/", socket: socket, upstream: "\(upstream)\n[upstream.limits]\n\(limits)")
        let daemon = try ManagedProcess.daemon(["--config", config, "--log-level", "debug"])
        guard await (awaitOpen ? daemon.awaitLink(.open) : daemon.awaitReady()) else {
            daemon.stop()
            feed.stop()
            throw TestFailure("the daemon did not start: \(daemon.stderr.text)")
        }
        return (feed, daemon, socket)
    }

    static func subscribe(_ stream: Int) -> String { #"{"method":"SUBSCRIBE","params":["s\#(stream)"],"id":\#(stream)}"# }

    /// Waits (60 s in all) until `app` has a message of each of `streams` after its line
    /// `mark`; returns the streams it has none of.
    static func flowing(_ app: SocketClient, _ streams: ClosedRange<Int>, after mark: Int) async -> [Int] {
        let deadline = ContinuousClock.now + .seconds(60)
        var missing: [Int] = []
        for n in streams {
            let left = max(.zero, deadline - ContinuousClock.now)
            if await app.lines.wait(from: mark, timeout: left, containing: #"\"stream\": \"s\#(n)\""#) == nil { missing.append(n) }
        }
        return missing
    }

    @Test func fortyStickySubscriptionsAtFiveASecondAllFlowAfterEachOfTenReconnectsWithNoViolation() async throws {
        let dir = try TemporaryDirectory()
        let (feed, daemon, socket) = try await Self.start(
            feed: ["--messages-per-second", "5", "--max-streams", "100", "--events-per-second", "2"], limits: "messages_per_second = 5", dir: dir)
        defer {
            daemon.stop()
            feed.stop()
        }
        let app = try await SocketClient.connected(to: socket, name: "app", daemon: daemon)
        // 40 at once: each is answered at once, and they go upstream at the feed's rate.
        for n in 1...40 {
            app.send(#"{"id":"k\#(n)","op":"send","text":\#(JSONValue.string(Self.subscribe(n)).serialized),"sticky":"s\#(n)"}"#)
        }
        for n in 1...40 {
            #expect(await app.reply("k\(n)")?["ok"] == true, "sticky \(n): \(app.lines.text.suffix(500))")
        }
        let waiting = try daemonStatus(socket).limits
        #expect(waiting?.messagesPerSecond == 5, "\(String(describing: waiting))")
        #expect(await Self.flowing(app, 1...40, after: 0) == [], "before any reconnect")
        for cut in 1...10 {
            let mark = app.lines.count
            app.send(#"{"id":"r\#(cut)","op":"reconnect"}"#)
            #expect(await app.reply("r\(cut)")?["ok"] == true)
            guard let open = await app.lines.wait(from: mark, timeout: .seconds(60), containing: #""type":"state","state":"open""#) else {
                Issue.record("reconnect \(cut): the link did not open again: \(daemon.stderr.lines.suffix(20))")
                return
            }
            let openIndex = app.lines.lines.lastIndex(of: open) ?? mark
            // Every message after the open line came on the new connection.
            let missing = await Self.flowing(app, 1...40, after: openIndex)
            #expect(missing == [], "reconnect \(cut): streams not flowing: \(missing); \(feed.stdout.lines.suffix(10))")
        }
        let lines = feed.stdout.lines
        #expect(lines.filter { $0.hasPrefix("violation") } == [])
        #expect(lines.filter { $0.hasPrefix("connected") }.count == 11, "\(lines.filter { $0.hasPrefix("connected") || $0.hasPrefix("closed") })")
        // Each connection got the 40 subscriptions once each.
        #expect(lines.filter { $0.hasPrefix("subscribed") }.count == 11 * 40)
        let status = try daemonStatus(socket)
        #expect((status.limits?.paced ?? 0) >= 10 * 35, "\(String(describing: status.limits))")
        let table = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", socket, "status"]).stdout
        #expect(table.contains("5/s (burst 1)"), "\(table)")
    }

    @Test func aFeedThatRefusesEveryUpgradeSeesNoMoreAttemptsThanTheLimitEvenOnAReconnect() async throws {
        let dir = try TemporaryDirectory()
        // The backoff (50 to 200 ms) would try several times a second; the limit allows 3 an hour.
        let (feed, daemon, socket) = try await Self.start(feed: ["--refuse"], limits: #"connect_attempts = "3/1h""#, dir: dir, awaitOpen: false)
        defer {
            daemon.stop()
            feed.stop()
        }
        try await awaitStatus(socket, "the fourth attempt waiting for the window") { ($0.limits?.connectWaitMs ?? 0) > 3_000_000 }
        #expect(feed.stdout.lines.filter { $0 == "refused" }.count == 3)
        // An operator's reconnect is an attempt too: it waits for the window as well.
        let app = try await SocketClient.connected(to: socket, name: "app", daemon: daemon)
        app.send(#"{"id":"r","op":"reconnect"}"#)
        #expect(await app.reply("r")?["ok"] == true)
        let status = try daemonStatus(socket)
        #expect(status.state == .connecting && status.limits?.attemptsInWindow == 3, "\(String(describing: status.limits))")
        #expect((status.limits?.connectWaitMs ?? 0) > 3_000_000)
        #expect(feed.stdout.lines.filter { $0 == "refused" }.count == 3)
        let table = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", socket, "status"]).stdout
        #expect(table.contains("connect attempts 3 of 3/3600s, the next in"), "\(table)")
    }

    /// An app holding a daemon-scope sticky subscription for each of `streams`.
    static func subscribed(streams: ClosedRange<Int>, socket: String, daemon: ManagedProcess) async throws -> SocketClient {
        let app = try await SocketClient.connected(to: socket, name: "app", daemon: daemon)
        for n in streams {
            app.send(#"{"id":"k\#(n)","op":"send","text":\#(JSONValue.string(Self.subscribe(n)).serialized),"sticky":"s\#(n)","scope":"daemon"}"#)
        }
        for n in streams {
            #expect(await app.reply("k\(n)")?["ok"] == true, "sticky \(n): \(app.lines.text.suffix(500))")
        }
        return app
    }

    /// A subscriber of the feed.
    static func reader(_ socket: String, _ daemon: ManagedProcess) async throws -> SocketClient {
        let reader = try await SocketClient.connected(to: socket, name: "reader", daemon: daemon)
        reader.send(#"{"id":"sub","op":"subscribe"}"#)
        #expect(await reader.reply("sub")?["ok"] == true)
        return reader
    }

    /// `streams` held (daemon scope) and read by a subscriber until the daemon renewed its
    /// connection `renewals` times: the subscriber, the status then, and each stream's updates.
    static func renewed(streams: ClosedRange<Int>, renewals: Int, timeout: Duration, socket: String, daemon: ManagedProcess) async throws -> (
        reader: SocketClient, status: StatusReport, streams: [String: [(u: Int, ts: Int64)]]
    ) {
        _ = try await Self.subscribed(streams: streams, socket: socket, daemon: daemon)
        let reader = try await Self.reader(socket, daemon)
        try await awaitStatus(socket, "\(renewals) renewals", timeout: timeout) { ($0.renewal?.renewals ?? 0) >= renewals }
        return (reader, try daemonStatus(socket), Self.updates(reader.lines.lines))
    }

    /// A subscriber's message lines: per stream, its update ids and the times they came.
    static func updates(_ lines: [String]) -> [String: [(u: Int, ts: Int64)]] {
        var streams: [String: [(u: Int, ts: Int64)]] = [:]
        for line in lines where line.contains(#""type":"message""#) {
            guard let message = try? JSONValue.parse(line), case .string(let data)? = message["data"], let event = try? JSONValue.parse(data),
                case .string(let stream)? = event["stream"], case .number(let u)? = event.value(at: "data.u"), case .number(let ts)? = message["ts"]
            else { continue }
            guard let u = u.intValue, let ts = ts.intValue else { continue }
            streams[stream, default: []].append((u, Int64(ts)))
        }
        return streams
    }

    @Test func twentyRenewalsOfTenStreamsAtFiftyASecondLoseNothingAndDoubleNothing() async throws {
        let dir = try TemporaryDirectory()
        // The feed ends every connection at 30 s; the daemon renews each at 2 s, paced under the
        // feed's 5 messages/s (4 a second, 4 back to back: a margin for the times they arrive),
        // telling the two connections' events apart by stream and update id. (At 10 s, a machine
        // busy enough made one renewal's new connection take 8 s to deliver, past the feed's cut.)
        let (feed, daemon, socket) = try await Self.start(
            feed: ["--messages-per-second", "5", "--max-streams", "20", "--events-per-second", "50", "--lifetime", "30"],
            limits: "messages_per_second = 4\nburst = 4",
            upstream: #"max_lifetime = "2s"\#nrenew_jitter = "0s"\#nrenew_when = "event=closing"\#ndedupe = ["stream", "data.u"]"#, dir: dir)
        defer {
            daemon.stop()
            feed.stop()
        }
        let (reader, status, streams) = try await Self.renewed(streams: 1...10, renewals: 20, timeout: .seconds(240), socket: socket, daemon: daemon)
        #expect(streams.count == 10, "\(streams.keys.sorted())")
        #expect(Self.onceInOrder(streams) == [])
        let longest = streams.mapValues { events in zip(events.dropFirst(), events).map { $0.ts - $1.ts }.max() ?? 0 }
        let seqs = reader.lines.lines.compactMap { line -> Int? in
            guard line.contains(#""type":"message""#), case .number(let seq)? = (try? JSONValue.parse(line))?["seq"] else { return nil }
            return seq.intValue
        }
        #expect(seqs == Array((seqs.first ?? 0)..<((seqs.first ?? 0) + seqs.count)), "seq is continuous")
        let lines = feed.stdout.lines
        #expect(lines.filter { $0.hasPrefix("violation") } == [])
        // Every connection the daemon replaced, it closed itself (1000), before the feed's cut (1001).
        let closes = lines.filter { $0.hasPrefix("closed") }
        #expect(
            closes.allSatisfy { $0.hasSuffix(" 1000") },
            "\(closes); the daemon's renewals: \(daemon.stderr.lines.filter { $0.contains("renew") }.prefix(12).joined(separator: "\n"))")
        #expect(status.reconnects == 0, "renewals are not reconnects")
        #expect((status.renewal?.duplicatesDropped ?? 0) > 0)
        let table = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", socket, "status"]).stdout
        #expect(table.contains("duplicates dropped; ") && table.contains("last: upstream.max_lifetime = 2s, overlap"), "\(table)")
        print(
            "renewals: \(status.renewal?.renewals ?? 0), duplicates dropped \(status.renewal?.duplicatesDropped ?? 0), events \(streams.values.map(\.count).reduce(0, +)), longest silence per stream (ms): \(longest.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")); last \(String(describing: status.renewal?.last))"
        )
    }

    /// Per stream: update ids none missing, none twice, in order, else what was wrong.
    static func onceInOrder(_ streams: [String: [(u: Int, ts: Int64)]]) -> [String] {
        streams.sorted(by: { $0.key < $1.key }).compactMap { stream, events in
            let ids = events.map(\.u)
            guard let first = ids.min(), let last = ids.max() else { return nil }
            let missing = (last - first + 1) - Set(ids).count
            let twice = ids.count - Set(ids).count
            guard missing != 0 || twice != 0 || ids != ids.sorted() else { return nil }
            return "\(stream): \(missing) missing, \(twice) twice between \(first) and \(last)\(ids == ids.sorted() ? "" : ", out of order")"
        }
    }

    /// A renewal due while the last one's old connection still closes begins as soon as that one
    /// ended, and the last overlap's dedupe stays for the connection that took over. Three sticky
    /// subscriptions paced at 2 a second take a new connection longer than its 1 s lifetime, so
    /// every renewal is due at its takeover; on every other connection of the feed each stream
    /// stalls 300 ms after its first event and stays that far behind, so each takeover by one of
    /// those leaves 300 ms of events the old one delivered still to come on it. Dropped, not doubled (before, the next renewal's start ended the last
    /// dedupe: ~15 events of each stream twice per such takeover). Raw, the link dedupes the
    /// wire's messages; with `protocol = "json"` its layer dedupes what apps see (the feed's
    /// events carry no id: they are broadcasts).
    @Test(arguments: ["raw", "json"])
    func aRenewalDueBeforeTheLastOneEndedDoublesNothingTheLastOverlapCaught(_ protocolName: String) async throws {
        let dir = try TemporaryDirectory()
        let (feed, daemon, socket) = try await Self.start(
            feed: ["--messages-per-second", "5", "--max-streams", "20", "--events-per-second", "50", "--lag-even", "0.3"],
            limits: "messages_per_second = 2\nburst = 1\n" + (protocolName == "raw" ? "" : "[protocol]\nid = \"id\"\n"),
            upstream: #"protocol = "\#(protocolName)"\#nmax_lifetime = "1s"\#nrenew_jitter = "0s"\#ndedupe = ["stream", "data.u"]"#, dir: dir)
        defer {
            daemon.stop()
            feed.stop()
        }
        let (_, status, streams) = try await Self.renewed(streams: 1...3, renewals: 8, timeout: .seconds(120), socket: socket, daemon: daemon)
        #expect(streams.count == 3, "\(streams.keys.sorted())")
        #expect(Self.onceInOrder(streams) == [])
        #expect(feed.stdout.lines.filter { $0.hasPrefix("violation") } == [])
        #expect(status.reconnects == 0 && status.renewal?.failed == 0, "\(String(describing: status.renewal))")
        // The lagging connections' late events, and the others' held ahead: well over one a takeover.
        #expect((status.renewal?.duplicatesDropped ?? 0) >= 8 * 3, "\(String(describing: status.renewal))")
    }

    @Test func fortyStreamsAtTwentyAConnectionFlowOnTwoAndACutRestoresOnlyItsOwn() async throws {
        let dir = try TemporaryDirectory()
        let (feed, daemon, socket) = try await Self.start(
            feed: ["--messages-per-second", "5", "--max-streams", "20", "--events-per-second", "10"], limits: "messages_per_second = 4\nburst = 4",
            upstream: "subscriptions_per_connection = 20\nconnections = 3", dir: dir)
        defer {
            daemon.stop()
            feed.stop()
        }
        let app = try await Self.subscribed(streams: 1...40, socket: socket, daemon: daemon)
        let reader = try await Self.reader(socket, daemon)
        #expect(await Self.flowing(reader, 1...40, after: 0) == [], "all 40 on 2 connections")
        var status = try daemonStatus(socket)
        #expect(status.connections?.map(\.subscriptions) == [20, 20], "\(String(describing: status.connections))")
        #expect(!feed.stdout.text.contains("max streams") && !reader.lines.text.contains("max streams"))
        #expect(feed.stdout.lines.filter { $0.hasPrefix("connected") } == ["connected 1", "connected 2"])
        let metrics = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", socket, "metrics"]).stdout
        #expect(metrics.contains(#"wsbridge_connection_subscriptions{connection="2"} 20"#), "\(metrics)")
        #expect(metrics.contains(#"wsbridge_connection_up{connection="1"} 1"#))
        // The first connection carries a send that is not a subscription: the feed cuts it.
        app.send(#"{"id":"cut","op":"send","text":"{\"method\":\"CUT\"}"}"#)
        #expect(await app.reply("cut")?["ok"] == true)
        #expect(await feed.stdout.wait(timeout: .seconds(30), containing: "closed 1 1012") != nil)
        // The new connection (3) restores the first's 20 (at 4 a second).
        #expect(await feed.stdout.wait(count: 20, timeout: .seconds(60)) { $0.hasPrefix("subscribed 3 ") }.count == 20)
        let afterRestore = reader.lines.count
        #expect(await Self.flowing(reader, 1...40, after: afterRestore) == [], "all 40 again after the cut")
        let lines = feed.stdout.lines
        // The new connection (3) restored the first's 20, and only them; the second's kept flowing.
        let restored = lines.filter { $0.hasPrefix("subscribed 3 ") }.map { String($0.dropFirst("subscribed 3 ".count)) }
        #expect(Set(restored) == Set((1...20).map { "s\($0)" }), "\(restored)")
        #expect(!lines.contains { $0.hasPrefix("closed 2") })
        let second = Self.updates(reader.lines.lines).filter { Int($0.key.dropFirst()).map { $0 > 20 } ?? false }
        for (stream, events) in second {
            let ids = events.map(\.u)
            #expect(ids.count == Set(ids).count && (ids.max() ?? 0) - (ids.min() ?? 0) + 1 == ids.count, "\(stream) was interrupted")
        }
        #expect(lines.filter { $0.hasPrefix("violation") } == [])
        // The second connection's subscriptions all leave: it closes; one connection is left.
        for n in 21...40 {
            app.send(
                #"{"id":"u\#(n)","op":"unstick","key":"s\#(n)","scope":"daemon","text":\#(JSONValue.string(#"{"method":"UNSUBSCRIBE","params":["s\#(n)"],"id":\#(n)}"#).serialized)}"#
            )
            #expect(await app.reply("u\(n)")?["ok"] == true, "unstick \(n): \(app.lines.text.suffix(300))")
        }
        #expect(await feed.stdout.wait(timeout: .seconds(30), containing: "closed 2 1000") != nil, "\(feed.stdout.lines.suffix(5))")
        status = try daemonStatus(socket)
        #expect(status.connections?.count == 1 && status.connections?.first?.subscriptions == 20, "\(String(describing: status.connections))")
        let table = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", socket, "status"]).stdout
        #expect(table.contains("connection 1"), "\(table)")
    }

    @Test func aRequestInFlightOnTheRenewedConnectionIsAnsweredThere() async throws {
        let dir = try TemporaryDirectory()
        let (feed, daemon, socket) = try await Self.start(
            feed: ["--messages-per-second", "5", "--max-streams", "20", "--events-per-second", "20"], limits: "messages_per_second = 4\nburst = 4",
            upstream: #"renew_when = "event=closing"\#ndedupe = ["stream", "data.u"]"#, dir: dir)
        defer {
            daemon.stop()
            feed.stop()
        }
        let app = try await Self.subscribed(streams: 1...2, socket: socket, daemon: daemon)
        let reader = try await Self.reader(socket, daemon)
        #expect(await Self.flowing(reader, 1...2, after: 0) == [])
        // A request the feed holds on connection 1 until the test releases it; then its notice
        // that it closes.
        let slow = JSONValue.string(#"{"method":"SLOW","id":77,"hold":true}"#).serialized
        app.send(#"{"id":"q","op":"request","text":\#(slow),"match":{"field":"id","equals":77},"timeout":30}"#)
        app.send(#"{"id":"n","op":"send","text":"{\"method\":\"NOTICE\"}"}"#)
        #expect(await app.reply("n")?["ok"] == true)
        // The new connection takes over before the answer comes (the feed holds it until then);
        // the old one stays for it.
        try await awaitStatus(socket, "the renewal", timeout: .seconds(60)) { ($0.renewal?.renewals ?? 0) >= 1 }
        feed.send("release 77")
        let answer = await app.reply("q")
        #expect(
            answer?["ok"] == true && answer?["result"]?["json"]?["result"] == "slow",
            "\(String(describing: answer)) \(feed.stdout.lines.filter { !$0.hasPrefix("recv") })")
        // Then it closes, by the daemon (1000).
        #expect(await feed.stdout.wait(timeout: .seconds(30), containing: "closed 1 1000") != nil, "\(feed.stdout.lines.suffix(5))")
        let lines = feed.stdout.lines
        #expect(lines.firstIndex(of: "answered 1 77").map { a in lines.firstIndex(of: "closed 1 1000").map { a < $0 } ?? false } == true)
    }

    /// Sends past the pace (1 a second, a burst of 1) while the link is open: the reply says they
    /// wait for the pace, not for the link to open (`waits`: `pace`).
    @Test func aSendHeldByThePaceSaysItWaitsForThePace() async throws {
        let dir = try TemporaryDirectory()
        let (feed, daemon, socket) = try await Self.start(feed: ["--messages-per-second", "5"], limits: "messages_per_second = 1\nburst = 1", dir: dir)
        defer {
            daemon.stop()
            feed.stop()
        }
        // 20 lines on one connection: unless this machine took 20 s to send them, more than the
        // burst and the pace's refill are sent before the last (the pace is the bound, not a clock).
        let lines = (1...20).map { #"{"method":"LIST_SUBSCRIPTIONS","id":\#($0)}"# }.joined(separator: "\n") + "\n"
        let r = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", socket, "send"], stdin: lines)
        #expect(r.status == 0, "\(r)")
        let replies = r.stdout.split(separator: "\n")
        #expect(replies.count == 20, "\(r.stdout)")
        #expect(replies.first == "sent", "\(r.stdout)")
        #expect(
            replies.contains { $0.hasPrefix("queued for the pace (upstream.limits): ") && $0.hasSuffix(" waiting, sent as the pace allows") }, "\(r.stdout)")
        #expect(!replies.contains { $0.contains("until the link opens") }, "\(r.stdout)")
        // All of them go, within the pace: no violation.
        #expect(await feed.stdout.wait(timeout: .seconds(120), containing: #"recv 1 {"method":"LIST_SUBSCRIPTIONS","id":20}"#) != nil)
        #expect(!feed.stdout.text.contains("violation"))
    }

    @Test func aSubscriptionWeighsTheStreamsItNamesAndAFullPoolSaysWhatToRaise() async throws {
        let dir = try TemporaryDirectory()
        let (feed, daemon, socket) = try await Self.start(
            feed: ["--messages-per-second", "5", "--max-streams", "4", "--events-per-second", "2"], limits: "messages_per_second = 4\nburst = 4",
            upstream: "subscriptions_per_connection = 4\nconnections = 2\nsubscription_weight = \"params\"", dir: dir)
        defer {
            daemon.stop()
            feed.stop()
        }
        let app = try await SocketClient.connected(to: socket, name: "app", daemon: daemon)
        // One SUBSCRIBE for 3 streams weighs 3; the next, for 2, does not fit beside it.
        let groups = [["s1", "s2", "s3"], ["s4", "s5"], ["s6", "s7", "s8"]]
        for (n, streams) in groups.enumerated() {
            let text = JSONValue.string(#"{"method":"SUBSCRIBE","params":[\#(streams.map { "\"\($0)\"" }.joined(separator: ","))],"id":\#(n)}"#).serialized
            app.send(#"{"id":"k\#(n)","op":"send","text":\#(text),"sticky":"g\#(n)","scope":"daemon"}"#)
        }
        #expect(await app.reply("k0")?["ok"] == true)
        #expect(await app.reply("k1")?["ok"] == true)
        // Both connections hold 3 and 2 of their 4: a third group of 3 fits on neither, and no
        // third connection may open.
        let refused = await app.reply("k2")
        #expect(refused?["ok"] == false && refused?["error"]?["code"] == "sticky_limit", "\(app.lines.text) \(feed.stdout.lines.prefix(12))")
        let message = refused?["error"]?["message"].flatMap { if case .string(let m) = $0 { m } else { nil } } ?? ""
        #expect(message.contains("upstream.connections = 2") && message.contains("raise either setting"), "\(message)")
        try await awaitStatus(socket, "two connections open") { $0.connections?.filter { $0.state == .open }.count == 2 }
        let status = try daemonStatus(socket)
        #expect(status.connections?.map(\.subscriptions) == [3, 2], "\(String(describing: status.connections))")
        #expect(await feed.stdout.wait(timeout: .seconds(30), containing: "subscribed 2 s5") != nil)
        #expect(!feed.stdout.text.contains("max streams"))
        // The refused key was never kept: nothing of it goes upstream on any open.
        #expect(!feed.stdout.text.contains("s6"))
    }

    @Test func aSubscriptionMadeWhileARenewalRestoresGoesOnBothConnections() async throws {
        let dir = try TemporaryDirectory()
        // Slow events: the new connection needs a while to show an event in common with the old.
        let (feed, daemon, socket) = try await Self.start(
            feed: ["--messages-per-second", "5", "--max-streams", "20", "--events-per-second", "0.5"], limits: "messages_per_second = 4\nburst = 4",
            upstream: #"max_lifetime = "2s"\#nrenew_jitter = "0s"\#nrenew_timeout = "20s"\#ndedupe = ["stream", "data.u"]"#, dir: dir)
        defer {
            daemon.stop()
            feed.stop()
        }
        let app = try await Self.subscribed(streams: 1...1, socket: socket, daemon: daemon)
        try await awaitStatus(socket, "a renewal restoring") { $0.renewal?.underway == "opening" }
        let before = try daemonStatus(socket).renewal?.renewals ?? 0
        // Made now, it goes on the old connection and on the new one: the new one can catch up.
        // (Without that, the new one never carries it, and the renewal fails at renew_timeout.)
        app.send(#"{"id":"k2","op":"send","text":\#(JSONValue.string(Self.subscribe(2)).serialized),"sticky":"s2","scope":"daemon"}"#)
        #expect(await app.reply("k2")?["ok"] == true)
        try await awaitStatus(socket, "the renewal under way done", timeout: .seconds(90)) { ($0.renewal?.renewals ?? 0) > before }
        let status = try daemonStatus(socket)
        #expect(status.renewal?.failed == 0, "\(String(describing: status.renewal))")
        // Each connection carried it once: the new one got it before its takeover, not again after.
        let carried = feed.stdout.lines.filter { $0.hasPrefix("recv ") && $0.contains(#""params":["s2"]"#) }.map { $0.split(separator: " ")[1] }
        #expect(!carried.isEmpty && Set(carried).count == carried.count, "\(carried)")
    }
}
