import Foundation
import Testing
import WSBridgeProtocol

/// `[fleet] role = "follower"` (docs/fleet.md) against Debian's nats-server with JetStream on: a
/// bridge publishes the test upstream's messages into the stream; a follower (a second daemon,
/// its own socket) serves them to its apps with the stream's seqs, resumes after its restart,
/// and its apps' sends reach the upstream through the bridge.
@Suite(.serialized) struct FleetFollowerTests {
    /// The bridge's and the follower's `[fleet]`.
    static func fleet(_ nats: NATSServer, role: String) -> String {
        "[fleet]\nrole = \"\(role)\"\nservers = [\"nats://127.0.0.1:\(nats.client)\"]\nstream = \"FEED\"\nsubject = \"feed.ticks\"\nack_timeout = \"2s\"\n"
    }

    /// A follower with a journal in `dir/journal` (its position across restarts).
    static func follower(_ dir: TemporaryDirectory, nats: NATSServer) async throws -> (ManagedProcess, String) {
        let socket = dir.file("follower.sock")
        let config = try writeDaemonConfig(
            dir, "follower", url: "ws://127.0.0.1:9/unused", socket: socket,
            extra: "[journal]\ndir = \"\(dir.file("journal"))\"\n" + Self.fleet(nats, role: "follower"))
        let daemon = try ManagedProcess.daemon(["--config", config], name: "follower")
        guard await daemon.awaitLink(.open, timeout: .seconds(30)) else { throw TestFailure("the follower never followed: \(daemon.stderr.text.suffix(3000))") }
        return (daemon, socket)
    }

    /// NATS with the stream FEED, the test upstream, a bridge publishing into the stream.
    static func bridge() async throws -> (TemporaryDirectory, NATSServer, UpstreamServer, ManagedProcess, String) {
        let dir = try TemporaryDirectory()
        let nats = try await FleetTests.jetStream(dir)
        guard try FleetTests.js(nats, ["create-stream", "FEED", "feed.>"]).first?["name"] == "FEED" else {
            nats.process.stop()
            throw TestFailure("the stream was not made")
        }
        let upstream = try await UpstreamServer(.nio)
        let socket = dir.file("bridge.sock")
        let config = try writeDaemonConfig(dir, "bridge", url: upstream.url, socket: socket, extra: Self.fleet(nats, role: "bridge"))
        let bridge = try ManagedProcess.daemon(["--config", config], name: "bridge")
        guard await bridge.awaitLink(.open) else { throw TestFailure(bridge.stderr.text) }
        try await awaitStatus(socket, "the bridge's fleet connected") { $0.fleet?.state == "connected" }
        return (dir, nats, upstream, bridge, socket)
    }

    /// The message lines `client` read from line `from` on: (seq, tick).
    static func ticks(_ client: SocketClient, from: Int = 0) -> [(seq: Int, tick: Int)] {
        client.lines.lines.dropFirst(from).compactMap { line in
            guard line.contains(#""type":"message""#), let json = try? JSONValue.parse(line), let seq = json["seq"]?.intValue,
                let tick = JournalTests.tick(json)
            else { return nil }
            return (seq, tick)
        }
    }

    /// The follower's app gets every message in order, numbered as the stream numbers it; after
    /// the follower's graceful restart while the feed flows, `since` resumes with nothing lost or
    /// doubled.
    @Test func aFollowersAppGetsEveryMessageInOrderAndResumesAcrossItsRestart() async throws {
        let (dir, nats, upstream, bridge, _) = try await Self.bridge()
        var (follower, socket) = try await Self.follower(dir, nats: nats)
        defer {
            follower.stop()
            bridge.stop()
            nats.process.stop()
        }
        let before = try await SocketClient.connected(to: socket, name: "before", daemon: follower)
        upstream.command("ticker 1000 64 3000")
        #expect(await JournalTests.waitForSeq(before, 800))
        follower.stop()
        _ = await follower.waitForExit()
        let first = Self.ticks(before)
        let since = try #require(first.last?.seq)
        (follower, socket) = try await Self.follower(dir, nats: nats)
        let after = try await SocketClient.connected(to: socket, name: "after", daemon: follower)
        after.send(#"{"op":"subscribe","since":\#(since)}"#)
        #expect(await JournalTests.waitForSeq(after, 3000, timeout: .seconds(60)), "\(after.lines.lines.suffix(3))")
        let resumed = Self.ticks(after).filter { $0.seq > since }
        let all = first + resumed
        #expect(all.map(\.seq) == Array(1...3000), "\(FleetTests.summary(all.map(\.seq), 3000))")
        // The stream's seq is the message's place in it: tick n is the nth message.
        #expect(all.allSatisfy { $0.tick == $0.seq }, "\(all.filter { $0.tick != $0.seq }.prefix(5))")
        let status = try daemonStatus(socket)
        #expect(status.fleet?.role == "follower" && status.fleet?.streamSeq == 3000, "\(String(describing: status.fleet))")
    }

    /// A follower's app's `send` and `request` reach the upstream through the bridge; the
    /// request is answered by the message the upstream sends back, as the follower numbers it.
    @Test func aFollowersSendAndRequestReachTheUpstreamAndAreAnswered() async throws {
        let (dir, nats, upstream, bridge, _) = try await Self.bridge()
        let (follower, socket) = try await Self.follower(dir, nats: nats)
        defer {
            follower.stop()
            bridge.stop()
            nats.process.stop()
        }
        let app = try await SocketClient.connected(to: socket, name: "app", daemon: follower)
        app.send(#"{"op":"send","id":1,"text":"{\"hello\":\"from a follower\"}"}"#)
        let sent = await app.lines.wait { $0.contains(#""id":1"#) && !$0.contains(#""type":"message""#) }
        #expect(sent?.contains(#""ok":true"#) == true, "\(sent ?? "no reply")")
        // The test upstream echoes: the echo goes into the stream and back to the follower.
        #expect(await app.lines.wait(containing: #"from a follower"#) != nil)
        app.send(#"{"op":"request","id":2,"text":"{\"rid\":41,\"q\":1}","match":{"field":"rid","equals":41},"timeout":10}"#)
        let answer = await app.lines.wait { $0.contains(#""id":2"#) }
        let json = try JSONValue.parse(try #require(answer))
        #expect(json["ok"] == true, "\(answer ?? "")")
        #expect(json.value(at: "result.json.rid")?.intValue == 41, "\(answer ?? "")")
        let seq = try #require(json.value(at: "result.seq")?.intValue)
        #expect(try daemonStatus(socket).seq == seq, "the answer's seq is the follower's (the stream's)")
        #expect(await upstream.event(#"message {"hello":"from a follower"}"#) != nil)
        let status = try daemonStatus(socket)
        #expect(status.fleet?.forwarded == 2, "\(String(describing: status.fleet))")
        // A sticky send is the bridge's to hold: refused here, saying so.
        app.send(#"{"op":"send","id":3,"text":"{\"sub\":1}","sticky":"s1"}"#)
        let sticky = await app.lines.wait { $0.contains(#""id":3"#) }
        #expect(sticky?.contains("follower") == true && sticky?.contains(#""ok":false"#) == true, "\(sticky ?? "")")
    }
}
