import Foundation
import Testing
import WSBridgeProtocol

/// The Debian package, as an operator meets it: built by scripts/package (lintian has no
/// error), installed with dpkg, upgraded over an edited configuration, removed and purged.
/// As root, with the release binaries scripts/test builds (WSBRIDGE_RELEASE_BIN_DIR), in a step
/// of its own after the other tests (WSBRIDGE_PACKAGE_TESTS=1): building and installing the
/// package twice is heavy work that would slow the time-bound tests beside it.
@Suite(.serialized) struct PackageTests {
    static let release = ProcessInfo.processInfo.environment["WSBRIDGE_RELEASE_BIN_DIR"]
    static var canRun: Bool {
        ProcessInfo.processInfo.environment["WSBRIDGE_PACKAGE_TESTS"] == "1"
            && getuid() == 0 && release != nil && FileManager.default.isExecutableFile(atPath: "/usr/bin/dpkg-deb")
            && FileManager.default.isExecutableFile(atPath: "/usr/bin/lintian")
    }

    /// The places the package and its maintainer scripts write to, listed recursively.
    static let watched = [
        "/etc/wsbridge", "/etc/systemd/system", "/lib/systemd/system", "/usr/bin", "/usr/share/doc/wsbridge", "/usr/share/man/man1",
        "/usr/share/man/man8", "/usr/share/bash-completion/completions", "/usr/share/zsh/vendor-completions",
        "/usr/share/fish/vendor_completions.d", "/var/lib/wsbridged", "/var/lib/private", "/var/lib/systemd/deb-systemd-helper-enabled",
        "/var/lib/systemd/deb-systemd-helper-masked", "/var/lib/dpkg/info",
    ]

    static func fileList() throws -> [String] {
        let existing = Self.watched.filter { FileManager.default.fileExists(atPath: $0) }
        let r = try run("/usr/bin/find", existing)
        return r.output.split(separator: "\n").map(String.init).sorted()
    }

    /// scripts/package into `out`; returns the .deb's path and what lintian said.
    static func package(into out: String, version: String? = nil) throws -> (deb: String, output: String) {
        var env = ProcessInfo.processInfo.environment
        env["WSBRIDGE_BIN_DIR"] = Self.release
        env["GENERATE_MANUAL"] = env["GENERATE_MANUAL"] ?? "\(Paths.bin)/generate-manual"
        if let version { env["VERSION"] = version }
        let r = try spawnAndWait("\(Paths.root)/scripts/package", [out], environment: env, directory: Paths.root)
        guard r.status == 0 else { throw TestFailure("scripts/package exited \(r.status): \(r.stdout)\(r.stderr)") }
        return (r.stdout.trimmingCharacters(in: .whitespacesAndNewlines), r.stderr)
    }

    static func dpkg(_ arguments: [String], environment: [String: String]? = nil) throws -> String {
        try run("/usr/bin/dpkg", arguments, environment: environment).output
    }

    static func installedVersion() throws -> String {
        try run("/usr/bin/dpkg-query", ["-W", "-f", "${Version}", "wsbridge"]).output
    }

    @Test(.enabled(if: canRun, "needs WSBRIDGE_PACKAGE_TESTS=1, root, dpkg-deb, lintian and the release binaries (scripts/test's package step)"))
    func installUpgradeRemoveAndPurge() throws {
        // A leftover of an interrupted run would spoil the before/after comparison.
        if try run("/usr/bin/dpkg-query", ["-W", "wsbridge"], allowFailure: true).status == 0 {
            _ = try Self.dpkg(["--purge", "wsbridge"])
        }
        let dir = try TemporaryDirectory()
        let (deb, lint) = try Self.package(into: dir.file("first"))
        print("lintian on \(deb):\n\(lint)")
        #expect(!lint.split(separator: "\n").contains { $0.hasPrefix("E: ") }, "\(lint)")
        let contents = try run("/usr/bin/dpkg-deb", ["-c", deb]).output
        #expect(contents.contains("./usr/bin/wsbridged"))
        // Depends: computed from what the binaries link.
        let depends = try run("/usr/bin/dpkg-deb", ["-f", deb, "Depends"]).output
        #expect(depends.contains("libsystemd0") && depends.contains("libc6"), "\(depends)")
        // The NATS C client is loaded only with [fleet]: suggested, not a dependency.
        #expect(!depends.contains("libnats"), "\(depends)")
        #expect(try run("/usr/bin/dpkg-deb", ["-f", deb, "Suggests"]).output.contains("libnats3.4"))

        let before = try Self.fileList()
        let groupBefore = try run("/usr/bin/getent", ["group", "wsbridge"], allowFailure: true).status == 0
        var env = ProcessInfo.processInfo.environment
        env["WSBRIDGE_ENABLE"] = nil
        _ = try Self.dpkg(["-i", deb], environment: env)
        let version = try Self.installedVersion()
        #expect(version == WSBridgeVersion.current)

        // The files are where the units expect them.
        let unit = try String(contentsOfFile: "/lib/systemd/system/wsbridged.service", encoding: .utf8)
        let exec = try #require(unit.split(separator: "\n").first { $0.hasPrefix("ExecStart=") }).dropFirst("ExecStart=".count).split(separator: " ")
        #expect(exec.first == "/usr/bin/wsbridged" && FileManager.default.isExecutableFile(atPath: String(exec[0])), "\(exec)")
        #expect(exec.contains("/etc/wsbridge/wsbridged.toml") && FileManager.default.fileExists(atPath: "/etc/wsbridge/wsbridged.toml"))
        // The token is optional: an empty credential while /etc/wsbridge/token does not exist.
        #expect(unit.contains("SetCredential=token:\\n\nLoadCredential=token:/etc/wsbridge/token"))
        #expect(!FileManager.default.fileExists(atPath: "/etc/wsbridge/token"))
        // Every doc the shipped configuration names is shipped.
        let config = try String(contentsOfFile: "/etc/wsbridge/wsbridged.toml", encoding: .utf8)
        let named = Set(config.matches(of: /docs\/([a-z-]+\.md)/).map { String($0.1) })
        #expect(named.count >= 4, "\(named)")
        for doc in named { #expect(FileManager.default.fileExists(atPath: "/usr/share/doc/wsbridge/\(doc)"), "\(doc) is named but not shipped") }
        // The daemon's user, in the socket's group.
        let user = try run("/usr/bin/id", ["wsbridge"], allowFailure: true).output
        #expect(user.contains("(wsbridge)") && unit.contains("User=wsbridge\nGroup=wsbridge"), "\(user)")
        #expect(unit.contains("file:/usr/share/doc/wsbridge/protocol.md") && FileManager.default.fileExists(atPath: "/usr/share/doc/wsbridge/protocol.md"))
        for page in ["/usr/share/man/man8/wsbridged.8.gz", "/usr/share/man/man1/wsbridgectl.1.gz"] {
            #expect(FileManager.default.fileExists(atPath: page), "\(page)")
        }
        #expect(try run("/usr/bin/getent", ["group", "wsbridge"], allowFailure: true).status == 0, "the socket's group")
        // Not enabled unless asked.
        #expect(!FileManager.default.fileExists(atPath: "/etc/systemd/system/sockets.target.wants/wsbridged.socket"))

        // The installed (stripped) binaries run, and say the package's version.
        for binary in ["/usr/bin/wsbridged", "/usr/bin/wsbridgectl"] {
            let out = try run(binary, ["--version"]).output
            #expect(out.hasPrefix(version), "\(binary): \(out)")
        }
        let check = try run("/usr/bin/wsbridged", ["--check-config", "--config", "/etc/wsbridge/wsbridged.toml"], allowFailure: true)
        #expect(check.status == 0, "\(check.output)")
        let manual = try run("/usr/bin/man", ["-P", "cat", "8", "wsbridged"], environment: ["MANWIDTH": "100", "PATH": "/usr/bin:/bin"]).output
        #expect(manual.contains("wsbridge \(version)") && manual.contains("SIGNALS"), "\(manual.prefix(400))")

        // systemd-analyze verify of the installed units says nothing.
        for name in ["wsbridged.service", "wsbridged.socket", "wsbridged@.service", "wsbridged@.socket"] {
            let (status, output) = try run("/usr/bin/systemd-analyze", ["verify", "/lib/systemd/system/\(name)"], allowFailure: true)
            #expect(status == 0 && output.isEmpty, "\(name): \(output)")
        }

        // An upgrade to a rebuilt package keeps the operator's edits.
        let edited = try String(contentsOfFile: "/etc/wsbridge/wsbridged.toml", encoding: .utf8) + "\n# edited by the operator\n"
        try edited.write(toFile: "/etc/wsbridge/wsbridged.toml", atomically: false, encoding: .utf8)
        let (rebuilt, _) = try Self.package(into: dir.file("second"), version: "\(WSBridgeVersion.current)+rebuild1")
        _ = try Self.dpkg(["-i", rebuilt])
        #expect(try Self.installedVersion() == "\(WSBridgeVersion.current)+rebuild1")
        #expect(try String(contentsOfFile: "/etc/wsbridge/wsbridged.toml", encoding: .utf8) == edited)
        let strays = try FileManager.default.contentsOfDirectory(atPath: "/etc/wsbridge").filter { $0.contains(".dpkg-") }
        #expect(strays.isEmpty, "\(strays)")

        // Remove: the program goes, the configuration and the spool stay.
        for dir in ["/var/lib/wsbridged/spool", "/var/lib/wsbridged-feed2/spool"] {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            try "record".write(toFile: "\(dir)/outbound.log", atomically: false, encoding: .utf8)
        }
        _ = try Self.dpkg(["-r", "wsbridge"])
        #expect(!FileManager.default.fileExists(atPath: "/usr/bin/wsbridged"))
        #expect(try String(contentsOfFile: "/etc/wsbridge/wsbridged.toml", encoding: .utf8) == edited)
        #expect(FileManager.default.fileExists(atPath: "/var/lib/wsbridged/spool/outbound.log"))
        #expect(FileManager.default.fileExists(atPath: "/var/lib/wsbridged-feed2/spool/outbound.log"))

        // Purge: nothing is left behind.
        _ = try Self.dpkg(["--purge", "wsbridge"])
        let after = try Self.fileList()
        #expect(after == before, "left behind: \(Set(after).subtracting(before).sorted()); removed: \(Set(before).subtracting(after).sorted())")
        // The group goes too (postinst made it, or found it from an earlier install).
        #expect(try run("/usr/bin/getent", ["group", "wsbridge"], allowFailure: true).status != 0, "group wsbridge left (it existed before: \(groupBefore))")
        #expect(try run("/usr/bin/getent", ["passwd", "wsbridge"], allowFailure: true).status != 0, "user wsbridge left")
        #expect(!FileManager.default.fileExists(atPath: "/var/lib/wsbridged-feed2"))
    }

    /// scripts/install (as a distribution would run it) and the package install the same files.
    @Test(.enabled(if: canRun, "needs WSBRIDGE_PACKAGE_TESTS=1, root, dpkg-deb, lintian and the release binaries (scripts/test's package step)"))
    func theInstallScriptAndThePackageInstallTheSameFiles() throws {
        let dir = try TemporaryDirectory()
        let (deb, _) = try Self.package(into: dir.file("deb"))
        let packaged = try run("/usr/bin/dpkg-deb", ["-c", deb]).output.split(separator: "\n")
            .compactMap { $0.split(separator: " ", omittingEmptySubsequences: true).last.map { String($0.dropFirst()) } }
            .filter { !$0.hasSuffix("/") }.sorted()
        var env = ProcessInfo.processInfo.environment
        env["DESTDIR"] = dir.file("root")
        env["PREFIX"] = "/usr"
        env["UNITDIR"] = "/lib/systemd/system"
        env["WSBRIDGE_BIN_DIR"] = Self.release
        env["GENERATE_MANUAL"] = env["GENERATE_MANUAL"] ?? "\(Paths.bin)/generate-manual"
        let install = try run("\(Paths.root)/scripts/install", [], environment: env, directory: Paths.root, allowFailure: true)
        #expect(install.status == 0, "\(install.output)")
        let installed = try run("/usr/bin/find", [dir.file("root"), "-type", "f"]).output.split(separator: "\n")
            .map { String($0.dropFirst(dir.file("root").count)) }
            .sorted()
        #expect(
            installed == packaged,
            "only installed: \(Set(installed).subtracting(packaged).sorted()); only packaged: \(Set(packaged).subtracting(installed).sorted())")
        #expect(packaged.count >= 20)
    }
}
