import Foundation
import Testing
import WSBridgeProtocol

/// The short form of scripts/autobahn: the Autobahn TestSuite's cases 1–7, 9 and 10 against the
/// daemon, echoing through its socket. No case may fail; the close-handshake and UTF-8 cases
/// this project fixed must be OK (docs/conformance.md explains what remains NON-STRICT).
@Suite(.serialized) struct AutobahnTests {
    static let suite = "\(Paths.root)/.build/autobahn/py27/bin/python"
    /// A release build (scripts/test makes one): a debug daemon needs over 15 minutes here.
    static let bin = ProcessInfo.processInfo.environment["WSBRIDGE_RELEASE_BIN_DIR"] ?? "\(Paths.root)/.build/release"

    /// Runs `script` (scripts/autobahn.d) on cases 1–7, 9 and 10; its summary.
    static func run(_ script: String, timeout: Duration) async throws -> JSONValue {
        let dir = try TemporaryDirectory()
        let summary = dir.file("autobahn.json")
        let run = try ManagedProcess(
            Paths.python,
            [
                "-u", "\(Paths.root)/scripts/autobahn.d/\(script)", "--bin", Self.bin, "--python27", Self.suite,
                "--cases", "1-7,9,10", "--reports", dir.file("reports"), "--json", summary,
            ],
            name: script
        )
        let status = await run.waitForExit(timeout: timeout)
        print(run.stdout.text)
        #expect(status == 0, "\(run.stdout.text)\n\(run.stderr.text)")
        let json = try JSONValue.parse(Array(try Data(contentsOf: URL(fileURLWithPath: summary))))
        #expect(json.value(at: "counts.FAILED") == nil, "\(json.serialized)")
        #expect((json.value(at: "counts.OK")?.intValue ?? 0) >= 280, "\(json.serialized)")
        return json
    }

    @Test(
        .enabled(if: FileManager.default.isExecutableFile(atPath: suite), "needs the suite: scripts/setup installs it into .build/autobahn"),
        .enabled(if: FileManager.default.isExecutableFile(atPath: "\(bin)/wsbridged"), "needs a release build of wsbridged")
    )
    func shortFormHasNoFailedCase() async throws {
        let json = try await Self.run("run.py", timeout: .seconds(900))
        let fixed = ["6.4.1", "6.4.2", "6.4.3", "6.4.4", "7.3.2", "7.5.1"] + (1...9).map { "7.9.\($0)" }
        for case_ in fixed {
            #expect(json.value(at: "results")?[case_] == "OK", "case \(case_)")
        }
    }

    /// The server side: the suite's fuzzing client against the WebSocket face, through the daemon
    /// to an echoing upstream and back (scripts/autobahn --face). No case may fail.
    @Test(
        .enabled(if: FileManager.default.isExecutableFile(atPath: suite), "needs the suite: scripts/setup installs it into .build/autobahn"),
        .enabled(if: FileManager.default.isExecutableFile(atPath: "\(bin)/wsbridged"), "needs a release build of wsbridged")
    )
    func theWebSocketFaceHasNoFailedServerCase() async throws {
        let json = try await Self.run("face.py", timeout: .seconds(1800))
        // Each a rule of the server side: a reserved bit, a fragmented ping, a bad close code, a
        // text message that is not UTF-8, fragments of a 4 MiB message 64 bytes each.
        for case_ in ["3.2", "5.1", "7.9.1", "6.3.1", "9.3.1"] {
            #expect(["OK", "NON-STRICT"].contains(json.value(at: "results")?[case_]?.stringValue ?? ""), "case \(case_)")
        }
    }
}
