import Foundation
import Testing
import WSBridgeProtocol

/// The short form of scripts/torture: every attack against a real daemon, with the bounds that
/// hold whatever the machine's speed (memory, fds, bystanders complete and in order, status
/// answered, no spinning when out of fds). Its figures are printed for the log.
@Suite(.serialized) struct TortureTests {
    @Test func everyBoundHoldsUnderTheShortTorture() async throws {
        let dir = try TemporaryDirectory()
        let report = dir.file("torture.json")
        let torture = try ManagedProcess(
            Paths.python,
            ["-u", "\(Paths.root)/scripts/torture.py", "--short", "--bin", Paths.bin, "--json", report],
            name: "torture"
        )
        let status = await torture.waitForExit(timeout: .seconds(600))
        print(torture.stdout.text)
        #expect(status == 0, "\(torture.stdout.text)\n\(torture.stderr.text)")
        let json = try JSONValue.parse(Array(try Data(contentsOf: URL(fileURLWithPath: report))))
        #expect(json["problems"] == [])
        guard case .array(let results)? = json["results"] else {
            Issue.record("no results")
            return
        }
        // Every attack ran.
        let attacks = results.compactMap { $0["attack"]?.stringValue }
        for name in ["flooding non-reader", "stalled subscriber", "churn", "long filters", "garbage", "replay ring", "fd exhaustion"] {
            #expect(attacks.contains { $0.contains(name) }, "\(name) missing from \(attacks)")
        }
    }
}
