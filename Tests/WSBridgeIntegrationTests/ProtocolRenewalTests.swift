import Foundation
import Testing
import WSBridgeCore
import WSBridgeProtocol

/// Renewals with `upstream.protocol` against Debian's nats-server: the new connection runs a
/// session of its own (its own sids on the wire, its subscriptions restored on it) beside the old
/// one, and the two connections' messages are matched as the apps see them (the same MSG carries
/// other sids on each), so apps get every message once, with their own sids, across renewals.
@Suite(.serialized) struct ProtocolRenewalTests {
    /// A daemon renewing its connection every 2 s; `upstream`: more keys of [upstream].
    static func daemon(_ dir: TemporaryDirectory, _ server: NATSServer, upstream: String = "") async throws -> (ManagedProcess, String) {
        try await ProtocolPoolTests.daemon(dir, server, pool: false, upstream: "max_lifetime = \"2s\"\nrenew_jitter = \"0s\"\n" + upstream)
    }

    /// The NATS messages in an app's WebSocket messages (the server puts several in one): subject, sid, payload.
    static func messages(_ app: TextApp) -> [(subject: String, sid: String, payload: String)] {
        var out: [(String, String, String)] = []
        for text in app.texts() {
            var rest = Substring(text)
            while let head = rest.range(of: "\r\n") {
                let fields = rest[..<head.lowerBound].split(separator: " ")
                rest = rest[head.upperBound...]
                guard fields.first == "MSG", fields.count >= 4, let length = Int(fields.last!) else { continue }
                let payload = String(rest.utf8.prefix(length)) ?? ""
                rest = rest.dropFirst(payload.count + 2)
                out.append((String(fields[1]), String(fields[2]), payload))
            }
        }
        return out
    }

    /// Ten subjects at 50 messages a second each, published by a client of the server's own (not
    /// through the daemon), over at least four renewals: each app gets every message of its
    /// subjects once, in order, with its own sids (b holds s.0 under another sid than a's); no
    /// reconnect; the overlaps dropped duplicates.
    @Test func renewalsWithNATSLoseNothingAndDoubleNothing() async throws {
        let dir = try TemporaryDirectory()
        let server = try await NATSServer.start(dir)
        defer { server.process.stop() }
        // The first renewal comes 2 s after the start, before the feed flows: its new connection
        // waits for the feed's first message to match. A busy machine once took more than the
        // default renew_timeout (30 s) from the start to the publisher's first message, and that
        // renewal was given up for want of a feed, not of a rule.
        let (daemon, socket) = try await Self.daemon(dir, server, upstream: "renew_timeout = \"300s\"")
        defer { daemon.stop() }
        let a = try await TextApp.connect(socket, "a", of: daemon)
        let b = try await TextApp.connect(socket, "b", of: daemon)
        #expect(await ProtocolPoolTests.subscribe(a, (0..<10).map { "s.\($0)" } + ["done"], name: "sa"))
        b.send("SUB s.0 7\r\n", request: "sb")
        #expect(await b.client.reply("sb")?["ok"] == true)
        try await eventually("the server to hold the subjects", { try server.subjects() }, until: { Set($0).count == 11 })

        let count = 700
        let publisher = try ManagedProcess(
            Paths.python, ["-u", "\(Paths.root)/Tests/peers/nats_publisher.py", "--port", "\(server.client)", "--count", "\(count)"],
            name: "publisher")
        defer { publisher.stop() }
        #expect(await publisher.stdout.wait(timeout: .seconds(60)) { $0.hasPrefix("published") } != nil, "\(publisher.stderr.text)")
        #expect(await a.wait(timeout: .seconds(30)) { $0.contains("MSG done 11 1\r\n.\r\n") } != nil, "\(a.texts().suffix(3))")

        let status = try daemonStatus(socket)
        #expect((status.renewal?.renewals ?? 0) >= 4, "\(String(describing: status.renewal))")
        #expect(status.renewal?.failed == 0, "\(String(describing: status.renewal))")
        #expect(status.reconnects == 0, "renewals are not reconnects")
        #expect((status.renewal?.duplicatesDropped ?? 0) > 0)
        let got = Self.messages(a)
        for k in 0..<10 {
            let mine = got.filter { $0.subject == "s.\(k)" }
            #expect(mine.allSatisfy { $0.sid == "\(k + 1)" }, "s.\(k): sids \(Set(mine.map(\.sid)))")
            let values = mine.compactMap { Int($0.payload) }
            let missing = count - Set(values).count
            let twice = values.count - Set(values).count
            let twiceOf = Dictionary(grouping: values, by: { $0 }).filter { $0.value.count > 1 }.keys.sorted()
            #expect(
                values == Array(0..<count),
                "s.\(k): \(missing) missing, \(twice) twice (\(twiceOf.prefix(10))), in order: \(values == values.sorted())")
        }
        let bs = Self.messages(b)
        #expect(bs.allSatisfy { $0.subject == "s.0" && $0.sid == "7" })
        #expect(bs.compactMap { Int($0.payload) } == Array(0..<count), "b: \(bs.count) messages of s.0")
        #expect(!daemon.stderr.text.contains("renewal failed"))
        print(
            "NATS renewals: \(status.renewal?.renewals ?? 0), duplicates dropped \(status.renewal?.duplicatesDropped ?? 0), messages to a \(got.count), last \(String(describing: status.renewal?.last))"
        )
    }

    /// A request in flight across a renewal: asked on the old connection while the new one is
    /// restored (the feed is quiet, so the new one cannot take over yet), its responder answers
    /// once the new connection took over; the old one stays open for it (the reply reaches both
    /// connections, its id known only to the old one's session), and the app gets it once.
    @Test func aRequestAskedBeforeARenewalIsAnsweredAfterIt() async throws {
        let dir = try TemporaryDirectory()
        let server = try await NATSServer.start(dir)
        defer { server.process.stop() }
        let (daemon, socket) = try await Self.daemon(dir, server, upstream: "renew_timeout = \"60s\"")
        defer { daemon.stop() }
        let responder = try await TextApp.connect(socket, "responder", of: daemon)
        #expect(await ProtocolPoolTests.subscribe(responder, ["svc.add", "s.0"], name: "sr"))
        // Nothing flows: the renewal's new connection waits, restored, for a message to match.
        try await awaitStatus(socket, "a renewal under way") { $0.renewal?.underway == "opening" }
        let q = try await TextApp.connect(socket, "q", of: daemon)
        async let answer = q.request("PUB svc.add rep 5\r\n[1,2]\r\n", id: "r1", timeout: 60)
        guard let asked = await responder.wait({ $0.hasPrefix("MSG svc.add 1 _INBOX.wsbridged-") }),
            let inbox = asked.split(separator: "\r\n").first?.split(separator: " ").dropFirst(3).first
        else { throw TestFailure("the responder was not asked: \(responder.texts())") }
        // The feed flows (s.0 at 20 a second): the new connection takes over; the old one stays
        // for the request asked on it.
        let ticker = try ManagedProcess(
            Paths.python,
            ["-u", "\(Paths.root)/Tests/peers/nats_publisher.py", "--port", "\(server.client)", "--subjects", "1", "--rate", "20", "--count", "100000"],
            name: "ticker")
        defer { ticker.stop() }
        try await awaitStatus(socket, "the renewal done, its old connection held") { ($0.renewal?.renewals ?? 0) >= 1 }
        #expect(try daemonStatus(socket).renewal?.underway == "closing", "the old connection waits for the answer")
        responder.send("PUB \(inbox) 1\r\n3\r\n", request: "answer")
        let reply = await answer
        #expect(reply?.value(at: "result.json.payload") == "3" && reply?.value(at: "result.json.subject") == "rep", "\(String(describing: reply))")
        // The old connection closes once answered; the subscriptions flow on the new one.
        try await awaitStatus(socket, "the old connection closed") { $0.renewal?.underway != "closing" }
        let mark = responder.mark
        let p = try await TextApp.connect(socket, "p", of: daemon)
        NATSProtocolTests.publish(p, "svc.add", "x", request: "p")
        #expect(await responder.wait(from: mark) { $0 == "MSG svc.add 1 1\r\nx\r\n" } != nil)
        #expect(q.client.lines.lines.filter { $0.contains(#""id":"r1""#) }.count == 1, "answered once")
        #expect(!q.client.lines.lines.contains { $0.contains("link_lost") })
        #expect(try daemonStatus(socket).reconnects == 0)
    }
}
