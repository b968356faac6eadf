import Foundation
import Glibc
import Testing
import WSBridgeCore
import WSBridgeDaemon
import WSBridgeProtocol

/// Numbers pass byte-exact through every path that re-serializes JSON, against Python websockets.
@Suite struct ExactNumbersTests {
    static let id = "1234567890123456789"
    static let neighbour = "1234567890123456788"
    static let decimal = "0.1234567890123456789012345678901234567890"

    static func payload(_ id: String) -> String {
        #"{"id":\#(id),"px":\#(Self.decimal),"huge":1e999,"neg":-0,"e":1.50E+3}"#
    }

    @Test func inlineJSONFiltersRequestsAndTailKeepEveryDigit() async throws {
        let f = try await DaemonFixture(extraConfig: "inline_json = true", serverKind: .python)
        let c = try await f.client()
        let filtered = try await f.client(name: "filtered")
        filtered.send(#"{"id":"f","op":"subscribe","filter":{"field":"id","equals":\#(Self.id)}}"#)
        #expect(await filtered.reply("f")?["ok"] == true)
        let tail = try ManagedProcess("\(Paths.bin)/wsbridgectl", ["--socket", f.socket, "tail", "--json"], name: "tail")
        defer { tail.stop() }
        #expect(await tail.stderr.wait(containing: "following") != nil)

        f.server.command("send " + Self.payload(Self.id))
        f.server.command("send " + Self.payload(Self.neighbour))
        f.server.command("send " + Self.payload(Self.id))
        // Inline JSON: the payload appears in the line exactly as the server sent it.
        let lines = await c.lines.wait(count: 3) { $0.contains("\"type\":\"message\"") }
        #expect(lines.count == 3)
        #expect(lines.first?.contains(#""json":\#(Self.payload(Self.id))}"#) == true, "\(lines)")
        #expect(lines.dropFirst().first?.contains(#""json":\#(Self.payload(Self.neighbour))}"#) == true, "\(lines)")
        // The filter tells the neighbouring ids apart.
        let matched = await filtered.lines.wait(count: 2) { $0.contains("\"type\":\"message\"") }
        #expect(matched.count == 2)
        #expect(!filtered.lines.text.contains(Self.neighbour))
        // tail --json prints the daemon's lines exactly.
        let tailed = await tail.stdout.wait(count: 3) { $0.contains("\"type\":\"message\"") }
        #expect(tailed == lines)
        // A request's answer (the server's echo) carries the number exactly.
        c.send(#"{"id":"r","op":"request","text":"{\"rid\":\#(Self.id),\"px\":\#(Self.decimal)}","match":{"field":"rid","equals":\#(Self.id)},"timeout":10}"#)
        let reply = await c.lines.wait { $0.contains("\"type\":\"reply\"") && $0.contains("\"id\":\"r\"") }
        #expect(reply?.contains(#""json":{"rid":\#(Self.id),"px":\#(Self.decimal)}"#) == true, "\(reply ?? "no reply")")
    }
}
