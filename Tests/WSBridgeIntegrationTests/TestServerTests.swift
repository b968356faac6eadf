import Foundation
import Testing
import WSBridgeProtocol

/// wsbridge-testserver as someone running it by hand meets it: its help lists the stdin
/// commands; with stdin at /dev/null it serves on (and says so); a pipe's end stops it; SIGTERM
/// stops it even when its parent blocks or ignores the signal.
@Suite struct TestServerTests {
    @Test func helpListsTheStdinCommands() throws {
        let help = try run(Paths.testServer, ["--help"]).output
        for command in ["send TEXT", "burst N [SIZE]", "close CODE [REASON]", "stall on|off", "refuse on|off", "quit"] {
            #expect(help.contains(command), "\(command) missing from --help")
        }
    }

    @Test func stdinAtDevNullServesOnUntilSIGTERM() async throws {
        // Through a shell that ignores SIGTERM (inherited across exec): the server restores it.
        let server = try ManagedProcess("/bin/sh", ["-c", "trap '' TERM; exec '\(Paths.testServer)' --port 0 </dev/null"], name: "testserver")
        defer { server.stop() }
        let said = await server.stderr.wait(containing: "stdin is at its end")
        #expect(said?.contains("serving until SIGINT or SIGTERM") == true, "\(server.stderr.text)")
        let port = try #require(await server.stdout.wait(containing: "listening ")).split(separator: " ").last.map(String.init) ?? ""
        // Still serving: a WebSocket client (the daemon) opens a link.
        let dir = try TemporaryDirectory()
        let config = try writeDaemonConfig(dir, "d", url: "ws://127.0.0.1:\(port)/", socket: dir.file("d.sock"))
        let daemon = try ManagedProcess.daemon(["--config", config], name: "wsbridged")
        defer { daemon.stop() }
        #expect(await daemon.awaitLink(.open), "\(daemon.stderr.text)")
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == SIGTERM, "stopped by the signal")
    }

    @Test func thePipesEndStopsIt() async throws {
        let server = try ManagedProcess(Paths.testServer, ["--port", "0"], name: "testserver")
        defer { server.stop() }
        #expect(await server.stdout.wait(containing: "listening ") != nil)
        server.closeInput()
        #expect(await server.waitForExit() == 0)
        #expect(server.stderr.text.contains("stdin (a pipe) closed: stopping"), "\(server.stderr.text)")
    }

    /// `acks SIZE HOLD` (the cost benchmark's flood of Socket.IO acks): each emit with an ack id
    /// is acked with its id, but only once HOLD of them are ready, all at once and in order; a
    /// message the server sends in between comes before every one of them.
    @Test func heldAcksComeAtOnceInOrder() async throws {
        let dir = try TemporaryDirectory()
        let server = try await UpstreamServer(.nio, arguments: ["--no-echo"])
        let daemon = try ManagedProcess.daemon(["--url", server.url, "--socket", dir.file("d.sock")])
        defer { daemon.stop() }
        #expect(await daemon.awaitLink(.open), "\(daemon.stderr.text)")
        let app = try await SocketClient.connected(to: dir.file("d.sock"), daemon: daemon)
        // Commands run in order on the server's loop: once "armed" is back, acks are on.
        server.command("acks 40 3")
        server.command("send armed")
        #expect(await app.lines.wait(containing: "armed") != nil)
        for (n, id) in [7, 8].enumerated() {
            app.send(#"{"id":"e\#(n)","op":"send","text":"42\#(id)[\"ev\"]"}"#)
            #expect(await server.event("message 42\(id)[") != nil, "\(daemon.stderr.text)")
        }
        server.command("send marker")
        #expect(await app.lines.wait(containing: "marker") != nil)
        app.send(#"{"id":"e2","op":"send","text":"429[\"ev\"]"}"#)
        let lines = await app.lines.wait(count: 5) { $0.contains(#""type":"message""#) }
        #expect(lines.count == 5, "\(app.lines.text)")
        let texts = app.messages.compactMap { $0["data"]?.stringValue }
        #expect(texts.count == 5 && texts[0] == "armed" && texts[1] == "marker", "\(texts)")
        #expect(texts.dropFirst(2).map { $0.prefix(3) } == ["437", "438", "439"], "\(texts)")
        #expect(texts.dropFirst(2).allSatisfy { $0.utf8.count == 40 }, "\(texts)")
    }
}
