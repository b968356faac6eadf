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
}
