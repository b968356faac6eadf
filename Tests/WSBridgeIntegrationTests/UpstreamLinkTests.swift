import Foundation
import Testing
import WSBridgeCore
import WSBridgeDaemon
import WSBridgeProtocol

/// The upstream link against real servers on loopback: ours (SwiftNIO) and Python's `websockets`.
@Suite(.serialized) struct UpstreamLinkTests {
    @Test(arguments: UpstreamServer.Kind.allCases)
    func connectsEchoesAndReconnectsAfterServerClose(_ kind: UpstreamServer.Kind) async throws {
        let server = try await UpstreamServer(kind)
        let link = try await LinkHarness(try LinkHarness.configuration(url: server.url + "feed?x=1"))
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        #expect(await link.state(.open) != nil)
        #expect(await server.event("upgrade path=/feed?x=1") != nil)

        #expect(try await link.send("hello upstream"))
        #expect(await server.event("message hello upstream") != nil)
        #expect(await link.events.wait(containing: "message text hello upstream") != nil)

        let before = link.mark
        server.command("close 4000 maintenance")
        let backingOff = await link.state(.backingOff, from: before)
        #expect(backingOff?.contains("server closed (code 4000, \"maintenance\")") == true, "\(link.events.text)")
        // Closed before backoff.stable_after: a failed attempt, so the retry is the second.
        #expect(await link.events.wait(from: before, containing: "retry 2 ") != nil)
        #expect(await link.state(.open, from: before) != nil)
        #expect(try await link.send("after reconnect"))
        #expect(await server.event("message after reconnect") != nil)
    }

    @Test(arguments: UpstreamServer.Kind.allCases)
    func droppedTcpConnectionReconnects(_ kind: UpstreamServer.Kind) async throws {
        let server = try await UpstreamServer(kind)
        let link = try await LinkHarness(try LinkHarness.configuration(url: server.url))
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        #expect(await link.state(.open) != nil)
        let before = link.mark
        server.command("drop")
        let lost = await link.state(.backingOff, from: before)
        #expect(lost != nil)
        #expect(await link.state(.open, from: before) != nil)
    }

    @Test(arguments: UpstreamServer.Kind.allCases)
    func userCloseStaysClosedUntilConnect(_ kind: UpstreamServer.Kind) async throws {
        let server = try await UpstreamServer(kind)
        let link = try await LinkHarness(try LinkHarness.configuration(url: server.url))
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        #expect(await link.state(.open) != nil)
        let serverMark = server.mark
        link.handle.close(code: 1000, reason: "operator says stop")
        #expect(await link.state(.idle) != nil)
        #expect(await server.event("closed 1000 operator says stop", from: serverMark) != nil)
        // The backoff ceiling here is 200 ms: a reconnect would have started well within 2 s.
        let mark = link.mark
        #expect(await link.events.wait(from: mark, timeout: .seconds(2), containing: "attempt") == nil, "\(link.events.text)")
        link.handle.connect()
        #expect(await link.state(.open, from: mark) != nil)
    }

    @Test(arguments: UpstreamServer.Kind.allCases)
    func withheldPongsAreDetectedAsADeadLink(_ kind: UpstreamServer.Kind) async throws {
        let server = try await UpstreamServer(kind)
        var config = try LinkHarness.configuration(url: server.url)
        config.heartbeat.interval = .milliseconds(300)
        config.heartbeat.deadline = .milliseconds(400)
        let link = try await LinkHarness(config)
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        #expect(await link.state(.open) != nil)
        // Heartbeats are answered: an RTT is measured.
        #expect(await link.events.wait(containing: "rtt ") != nil)
        let mark = link.mark
        server.command("pings off")
        let started = ContinuousClock.now
        let dead = await link.state(.backingOff, from: mark)
        let detection = ContinuousClock.now - started
        #expect(dead?.contains("heartbeat deadline passed") == true, "\(link.events.text)")
        // Never before the deadline; at most interval + deadline after the last answered ping.
        #expect(detection >= .milliseconds(400))
        print("measure: \(kind) dead-link detection \(detection) (interval 300 ms + deadline 400 ms)")
        server.command("pings on")
        #expect(await link.state(.open, from: mark) != nil)
    }

    @Test func applicationHeartbeatTextGoesOutWithEveryPing() async throws {
        let server = try await UpstreamServer(.nio, arguments: ["--no-echo"])
        var config = try LinkHarness.configuration(url: server.url)
        config.heartbeat.interval = .milliseconds(200)
        config.heartbeat.text = "{\"op\":\"heartbeat\"}"
        let link = try await LinkHarness(config)
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        #expect(await link.state(.open) != nil)
        let first = await server.event("message {\"op\":\"heartbeat\"}")
        #expect(first != nil)
        #expect(await server.event("ping") != nil)
        let mark = server.mark
        #expect(await server.event("message {\"op\":\"heartbeat\"}", from: mark) != nil)
    }

    @Test(arguments: UpstreamServer.Kind.allCases)
    func oversizedMessageEndsTheLinkAndReconnects(_ kind: UpstreamServer.Kind) async throws {
        let server = try await UpstreamServer(kind)
        let (link, mark) = try await expectOversizeClosesWith1009(server, limit: 4096, size: 10000)
        defer { Task { await link.shutdown() } }
        #expect(await link.state(.open, from: mark) != nil)
        // Messages within the limit still flow.
        server.command("send small again")
        #expect(await link.events.wait(from: mark, containing: "message text small again") != nil)
    }

    @Test(arguments: UpstreamServer.Kind.allCases)
    func refusedUpgradeIsReportedAndRetried(_ kind: UpstreamServer.Kind) async throws {
        let server = try await UpstreamServer(kind)
        server.command("refuse on")
        server.command("count")  // commands run in order: the answer means `refuse on` is in force
        #expect(await server.event("clients 0") != nil)
        let link = try await LinkHarness(try LinkHarness.configuration(url: server.url))
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        let failed = await link.state(.backingOff)
        #expect(failed?.contains("HTTP 403") == true, "\(link.events.text)")
        #expect(await link.events.wait(containing: "attempt 3") != nil)
        server.command("refuse off")
        #expect(await link.state(.open) != nil)
    }

    @Test(arguments: UpstreamServer.Kind.allCases)
    func subprotocolIsNegotiated(_ kind: UpstreamServer.Kind) async throws {
        let server = try await UpstreamServer(kind, arguments: ["--subprotocol", "feed.v2"])
        var config = try LinkHarness.configuration(url: server.url)
        config.upstream.subprotocols = ["feed.v3", "feed.v2"]
        config.upstream.headers = [.init(name: "X-Client", value: "wsbridge-test")]
        let link = try await LinkHarness(config)
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        let open = await link.state(.open)
        #expect(open?.hasPrefix("state open: connected (subprotocol feed.v2") == true, "\(open ?? "")")
        let upgrade = await server.event("upgrade ")
        #expect(upgrade?.contains("protocols=feed.v3,") == true, "\(upgrade ?? "")")
    }

    @Test func connectionRefusedBacksOffWithGrowingAttempts() async throws {
        // A port nobody listens on: bind one, note it, close it.
        let server = try await UpstreamServer(.nio)
        let url = server.url
        server.process.stop()
        _ = await server.process.waitForExit()
        let link = try await LinkHarness(try LinkHarness.configuration(url: url))
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        let failed = await link.state(.backingOff)
        #expect(failed?.contains("cannot connect to 127.0.0.1") == true, "\(link.events.text)")
        #expect(await link.events.wait(containing: "retry 3 ") != nil)
    }
}
/// Opens a link with `limit` as max_message_size, has the server send `size` bytes, and expects
/// the link to close with 1009 and back off. Returns the link and the event mark before it.
func expectOversizeClosesWith1009(
    _ server: UpstreamServer,
    limit: Int,
    size: Int,
    sourceLocation: SourceLocation = #_sourceLocation
) async throws -> (LinkHarness, Int) {
    var config = try LinkHarness.configuration(url: server.url)
    config.upstream.maxMessageSize = limit
    let link = try await LinkHarness(config)
    link.handle.connect()
    #expect(await link.state(.open) != nil, sourceLocation: sourceLocation)
    let mark = link.mark
    let serverMark = server.mark
    server.command("oversize \(size)")
    let lost = await link.state(.backingOff, from: mark)
    #expect(lost?.contains("max_message_size") == true, "\(link.events.text)", sourceLocation: sourceLocation)
    #expect(await server.event("closed 1009", from: serverMark) != nil, sourceLocation: sourceLocation)
    return (link, mark)
}
