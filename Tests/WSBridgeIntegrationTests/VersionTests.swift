import Foundation
import Testing
import WSBridgeProtocol

/// One version (WSBridgeVersion.current) and the build's git commit, shown everywhere an operator
/// or a program looks: both binaries' --version, the hello line, status, the User-Agent sent
/// upstream and CHANGELOG.md. The man pages, the metrics and the package have their own tests.
@Suite struct VersionTests {
    /// What the binaries must show: `0.1.0 (commit 7f101b41ee15)` in a git checkout.
    static func expectedCommitPrefix() throws -> String? {
        guard FileManager.default.fileExists(atPath: "\(Paths.root)/.git") else { return nil }
        let r = try spawnAndWait("/usr/bin/git", ["-C", Paths.root, "rev-parse", "--short=12", "HEAD"])
        return r.status == 0 ? r.stdout.trimmingCharacters(in: .whitespacesAndNewlines) : nil
    }

    @Test func bothBinariesPrintTheVersionAndCommit() throws {
        let commit = try Self.expectedCommitPrefix()
        for binary in [Paths.daemon, "\(Paths.bin)/wsbridgectl"] {
            let r = try spawnAndWait(binary, ["--version"])
            #expect(r.status == 0)
            let text = r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(text == WSBridgeVersion.description, "\(binary): \(text)")
            #expect(text.hasPrefix(WSBridgeVersion.current + (commit.map { " (commit \($0)" } ?? "")), "\(binary): \(text)")
        }
    }

    @Test func helloStatusAndUserAgentCarryIt() async throws {
        let f = try await DaemonFixture()
        let c = try await f.client()
        let hello = try #require(await c.lines.wait(containing: "\"type\":\"hello\""))
        let parsed = try #require(Hello(json: try JSONValue.parse(hello)))
        #expect(parsed.version == WSBridgeVersion.current)
        #expect(parsed.commit == WSBridgeVersion.commit)
        if let commit = try Self.expectedCommitPrefix() { #expect(parsed.commit?.hasPrefix(commit) == true, "\(hello)") }

        c.send(#"{"op":"status","id":"v"}"#)
        let status = try #require(await c.reply("v"))
        #expect(status.value(at: "result.version")?.stringValue == WSBridgeVersion.current, "\(status)")
        #expect(status.value(at: "result.commit")?.stringValue == WSBridgeVersion.commit, "\(status)")

        let upgrade = try #require(await f.server.event("upgrade "))
        #expect(upgrade.hasSuffix(" ua=\(WSBridgeVersion.userAgent)"), "\(upgrade)")
        #expect(WSBridgeVersion.userAgent.hasPrefix("wsbridged/\(WSBridgeVersion.current)"))
    }

    /// The man pages scripts/install and scripts/package ship: generated from the binaries' help,
    /// with the sections help cannot give, the release in the footer, and no warning from man.
    @Test func manPagesHaveTheirSectionsAndTheVersion() throws {
        let dir = try TemporaryDirectory()
        let tool = ProcessInfo.processInfo.environment["GENERATE_MANUAL"] ?? "\(Paths.bin)/generate-manual"
        try #require(FileManager.default.isExecutableFile(atPath: tool), "build it: swift build --product generate-manual")
        _ = try run("/usr/bin/python3", ["\(Paths.root)/scripts/lib/manpages.py", "--tool", tool, "--bin", Paths.bin, "--out", dir.path])
        let daemon = try String(contentsOfFile: dir.file("wsbridged.8"), encoding: .utf8)
        let ctl = try String(contentsOfFile: dir.file("wsbridgectl.1"), encoding: .utf8)
        #expect(daemon.contains(".Dt WSBRIDGED 8") && ctl.contains(".Dt WSBRIDGECTL 1"))
        for page in [daemon, ctl] {
            #expect(page.contains(".Os wsbridge \(WSBridgeVersion.current)\n"))
            for section in [".Sh FILES", ".Sh ENVIRONMENT", ".Sh EXIT STATUS", ".Sh SEE ALSO"] { #expect(page.contains(section + "\n"), "\(section)") }
        }
        #expect(daemon.contains(".Sh SIGNALS\n"))
        // wsbridged has no subcommands: none in its synopsis, no `help` item.
        #expect(!daemon.contains("subcommand"), "\(daemon)")
        // Every exit code either program uses is listed.
        for code in ["0", "1", "64", "69", "73", "78"] { #expect(daemon.contains("\n.It \(code)\n"), "wsbridged exit \(code)") }
        for code in ["0", "1", "64", "69", "76", "77"] { #expect(ctl.contains("\n.It \(code)\n"), "wsbridgectl exit \(code)") }
        for name in ["wsbridged.8", "wsbridgectl.1"] {
            let r = try spawnAndWait("/usr/bin/man", ["--warnings", "-l", dir.file(name)], environment: ["MANWIDTH": "100", "PATH": "/usr/bin:/bin"])
            #expect(r.status == 0 && r.stderr.isEmpty, "\(name): \(r.stderr)")
            #expect(r.stdout.contains("EXIT STATUS"))
        }
    }

    /// The newest entry of CHANGELOG.md (which the package's changelog is made from) is this version.
    @Test func changelogNamesThisVersion() throws {
        let text = try String(contentsOfFile: "\(Paths.root)/CHANGELOG.md", encoding: .utf8)
        let first = try #require(text.split(separator: "\n").first { $0.hasPrefix("## ") })
        #expect(first.hasPrefix("## \(WSBridgeVersion.current) "), "\(first)")
    }
}
