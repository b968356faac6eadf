import Foundation
import Testing
import WSBridgeProtocol

/// `[fleet]` (docs/fleet.md) against Debian's nats-server with JetStream on: every message the
/// daemon numbers goes into the stream, in order, with its seq and stream as headers and a
/// `Nats-Msg-Id`, through the NATS C client (loaded at run time).
@Suite(.serialized) struct FleetTests {
    static func jetStream(_ dir: TemporaryDirectory, client: Int = 0) async throws -> NATSServer {
        try await NATSServer.start(dir, client: client, extra: "jetstream { store_dir: \"\(dir.file("js"))\" }")
    }

    /// Tests/peers/jetstream.py against `server`.
    static func js(_ server: NATSServer, _ arguments: [String]) throws -> [JSONValue] {
        let r = try spawnAndWait(Paths.python, ["\(Paths.root)/Tests/peers/jetstream.py", "--port", "\(server.client)"] + arguments)
        return r.stdout.split(separator: "\n").compactMap { try? JSONValue.parse(String($0)) }
    }

    static func daemon(_ dir: TemporaryDirectory, url: String, nats: NATSServer, fleet: String = "") async throws -> (ManagedProcess, String) {
        let socket = dir.file("d.sock")
        let config = try writeDaemonConfig(
            dir, "wsbridged", url: url, socket: socket,
            extra: "[fleet]\nservers = [\"nats://127.0.0.1:\(nats.client)\"]\nstream = \"FEED\"\nsubject = \"feed.ticks\"\n" + fleet)
        let daemon = try ManagedProcess.daemon(["--config", config], name: "wsbridged")
        guard await daemon.awaitLink(.open) else { throw TestFailure(daemon.stderr.text) }
        return (daemon, socket)
    }

    /// The stream's messages: JetStream's seq, the daemon's seq and stream, the id, the data.
    static func stored(_ server: NATSServer) throws -> [(js: Int, seq: Int, stream: String, id: String, data: String)] {
        try Self.js(server, ["messages", "FEED"]).map { m in
            (
                m["seq"]?.intValue ?? 0, Int(m.value(at: "headers.Wsbridge-Seq")?.stringValue ?? "") ?? 0,
                m.value(at: "headers.Wsbridge-Stream")?.stringValue ?? "", m.value(at: "headers.Nats-Msg-Id")?.stringValue ?? "",
                m["data"]?.stringValue ?? ""
            )
        }
    }

    @Test func everyMessageGoesIntoTheStreamInOrderWithItsSeq() async throws {
        let dir = try TemporaryDirectory()
        let nats = try await Self.jetStream(dir)
        defer { nats.process.stop() }
        #expect(try Self.js(nats, ["create-stream", "FEED", "feed.>"]).first?["name"] == "FEED")
        let upstream = try await UpstreamServer(.nio)
        let (daemon, socket) = try await Self.daemon(dir, url: upstream.url, nats: nats)
        defer { daemon.stop() }
        try await awaitStatus(socket, "the fleet connected") { $0.fleet?.state == "connected" }
        let reader = try SocketClient(path: socket, name: "reader")
        guard let hello = await reader.lines.wait(containing: #""type":"hello""#), let stream = try JSONValue.parse(hello)["stream"]?.stringValue
        else { throw TestFailure("no hello") }
        upstream.command("ticker 1000 64 2000")
        try await awaitStatus(socket, "2000 messages acknowledged by JetStream") { ($0.fleet?.acknowledgedThrough ?? 0) >= 2000 }
        let status = try daemonStatus(socket)
        #expect(status.fleet?.lag == 0 && status.fleet?.lost == 0 && status.fleet?.inFlight == 0, "\(String(describing: status.fleet))")
        let stored = try Self.stored(nats)
        #expect(stored.map(\.seq) == Array(1...2000), "\(stored.count) stored")
        #expect(stored.map(\.js) == Array(1...2000))
        #expect(stored.allSatisfy { $0.stream == stream && $0.id == "\(stream)-\($0.seq)" })
        // The same bytes the local subscriber got under the same seq.
        let local = reader.lines.lines.compactMap { try? JSONValue.parse($0) }.filter { $0["type"] == "message" }
        let bySeq = Dictionary(local.compactMap { m in m["seq"]?.intValue.map { ($0, m["data"]?.stringValue ?? "") } }) { a, _ in a }
        #expect(stored.allSatisfy { bySeq[$0.seq] == $0.data }, "data differs")
    }

    /// NATS killed (-9) while the feed flows, and started again on its port with its store: the
    /// messages wait, then go; JetStream has every one once, in order.
    @Test func aNATSRestartWhileFlowingLosesNothingAndDoublesNothing() async throws {
        let dir = try TemporaryDirectory()
        var nats = try await Self.jetStream(dir)
        defer { nats.process.stop() }
        #expect(try Self.js(nats, ["create-stream", "FEED", "feed.>"]).first?["name"] == "FEED")
        let upstream = try await UpstreamServer(.nio)
        let (daemon, socket) = try await Self.daemon(dir, url: upstream.url, nats: nats)
        defer { daemon.stop() }
        try await awaitStatus(socket, "the fleet connected") { $0.fleet?.state == "connected" }
        upstream.command("ticker 500 64 4000")
        try await awaitStatus(socket, "500 acknowledged") { ($0.fleet?.acknowledgedThrough ?? 0) >= 500 }
        nats.process.signal(SIGKILL)
        _ = await nats.process.waitForExit()
        try await awaitStatus(socket, "the fleet to see NATS gone") { $0.fleet?.state == "disconnected" }
        try await awaitStatus(socket, "messages waiting meanwhile") { ($0.fleet?.lag ?? 0) > 200 }
        nats = try await Self.jetStream(dir, client: nats.client)
        try await awaitStatus(socket, "every message acknowledged", timeout: .seconds(60)) { s in
            s.seq >= 4000 && s.fleet?.acknowledgedThrough == s.seq
        }
        let stored = try Self.stored(nats)
        #expect(
            stored.map(\.seq) == Array(1...4000),
            "\(stored.count) stored, first gaps: \(Array(Set(1...4000).subtracting(stored.map(\.seq)).sorted().prefix(5)))")
        #expect(try daemonStatus(socket).fleet?.lost == 0)
    }
}
