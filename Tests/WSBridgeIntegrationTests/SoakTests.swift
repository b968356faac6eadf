import Foundation
import Testing
import WSBridgeProtocol

/// scripts/soak's one-minute form and its reload storm against a real daemon: nothing lost,
/// nothing grows, every reload acknowledged to systemd (docs/soak.md).
@Suite(.serialized) struct SoakTests {
    /// Release binaries where scripts/test built them (the storm's 10k msg/s to 100 readers is
    /// beyond a debug build); under a sanitizer, the sanitized build at a tenth of the rate.
    static let sanitizer = ProcessInfo.processInfo.environment["WSBRIDGE_SANITIZER"]
    static let bin = sanitizer == nil ? ProcessInfo.processInfo.environment["WSBRIDGE_RELEASE_BIN_DIR"] ?? Paths.bin : Paths.bin

    func soak(_ arguments: [String]) async throws -> JSONValue {
        let dir = try TemporaryDirectory()
        let report = dir.file("soak.json")
        let soak = try ManagedProcess(
            Paths.python, ["-u", "\(Paths.root)/scripts/soak.py", "--bin", Self.bin, "--json", report] + arguments, name: "soak")
        let status = await soak.waitForExit(timeout: .seconds(600))
        print(soak.stdout.text)
        #expect(status == 0, "\(soak.stdout.text)\n\(soak.stderr.text)")
        return try JSONValue.parse(Array(try Data(contentsOf: URL(fileURLWithPath: report))))
    }

    @Test func aMinuteOfEverythingAtOnceLosesNothing() async throws {
        let json = try await self.soak(["1"] + (Self.sanitizer == nil ? [] : ["--rate", "100"]))
        #expect(json["problems"] == [])
        let r = json["result"]
        // It did what it says: cuts, queued sends, reloads, churn, deliveries; and lost nothing.
        #expect((r?["link_cuts"]?.intValue ?? 0) >= 2)
        #expect((r?["queued"]?.intValue ?? 0) > 0)
        #expect((r?["reloads"]?.intValue ?? 0) >= 15)
        #expect(r?["reloads_acknowledged"] == r?["reloads"])
        #expect((r?["churned_clients"]?.intValue ?? 0) > 100)
        #expect(r?["lost_queued"] == 0)
        #expect(r?["unannounced_gaps"] == 0)
        #expect(r?["sticky_sent"] == r?["sticky_expected"])
    }

    @Test func aHundredReloadsUnderLoadDropNothingUnannounced() async throws {
        let json = try await self.soak(["--reloads", "100"] + (Self.sanitizer == nil ? [] : ["--rate", "1000"]))
        #expect(json["problems"] == [])
        let r = json["result"]
        #expect(r?["reloads_acknowledged"] == 100)
        #expect(r?["subscribers"] == 100)
        #expect(r?["unannounced_gaps"] == 0)
        #expect(r?["fds_after"] == r?["fds_before"])
    }
}
