import CWSBridgeLinux
import Foundation
import Testing
import WSBridgeProtocol

/// The `wsbridged` executable as an operator runs it.
@Suite struct DaemonProcessTests {
    @Test func checkConfigAcceptsTheShippedExample() throws {
        let (status, output) = try runDaemon(["--check-config", "--config", "\(Paths.root)/etc/wsbridged.toml"], allowFailure: true)
        #expect(status == 0, "\(output)")
        #expect(output.contains("configuration OK"))
    }

    @Test func eachFailedAttemptIsOneLogLineSayingWhatComesNext() async throws {
        let dir = try TemporaryDirectory()
        // A port nothing listens on, and nothing else can take while the test runs: bound, never
        // listening (a connect to it is refused), held until the end.
        let held = try ReservedPort()
        defer { held.release() }
        let port = held.port
        let config = try dir.write(
            "refused.toml",
            """
            [upstream]
            url = "ws://127.0.0.1:\(port)/"
            [backoff]
            base = "20ms"
            cap = "40ms"
            [reachability]
            enabled = false
            [local]
            socket = "\(dir.file("run/d.sock"))"
            """
        )
        // At the default level (info), as an operator runs it. The socket's missing directory
        // is created, and the log says so.
        let daemon = try ManagedProcess.daemon(["--config", config], name: "wsbridged")
        defer { daemon.stop() }
        #expect(await daemon.stderr.wait(containing: "connect failed (attempt 3)") != nil, "\(daemon.stderr.text)")
        let lines = daemon.stderr.lines
        let failures = lines.filter { $0.contains("connect failed") }
        #expect(failures.count >= 3)
        for line in failures.prefix(3) {
            #expect(line.contains("connection refused; retrying in "), "\(line)")
            // The message once, not again in the metadata.
            #expect(!line.contains("error="), "\(line)")
        }
        #expect(lines.contains { $0.contains("created the socket's directory \(dir.file("run")) (mode 0755") }, "\(lines)")
        // Nothing else per attempt: no "connecting", "retrying" or retry-cycle state lines.
        #expect(!lines.contains { $0.contains("connecting (attempt") || $0.contains(" retrying in") && !$0.contains("connect failed") }, "\(lines)")
        #expect(!lines.contains { $0.contains("connecting -> backingOff") || $0.contains("backingOff -> connecting") }, "\(lines)")

        // The link never opened: status has a last error, and no "last close".
        let status = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", dir.file("run/d.sock"), "status", "--json"])
        let report = try StatusReport(json: try JSONValue.parse(status.stdout))
        #expect(report.lastClose == nil, "\(status.stdout)")
        #expect(report.lastError?.contains("connection refused") == true, "\(status.stdout)")
        let table = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", dir.file("run/d.sock"), "status"])
        #expect(!table.stdout.contains("last close"), "\(table.stdout)")
    }

    @Test func socketProblemsNameTheLimitThePathAndTheWayOut() throws {
        let dir = try TemporaryDirectory()
        let long = dir.file(String(repeating: "s", count: 120) + ".sock")
        let tooLong = try spawnDaemonAndWait(["--url", "ws://127.0.0.1:1/", "--socket", long])
        #expect(tooLong.status == 69)
        #expect(tooLong.stderr.contains("a Unix socket path holds at most 107 (108 with its terminating NUL)"), "\(tooLong.stderr)")

        // As nobody (root passes every permission check): the daemon with `socket` (nil: the
        // default /run path) must refuse to start, saying `expected`.
        func refusedAsNobody(socket: String?, saying expected: String) throws {
            let arguments = ["--reuid", "nobody", "--regid", "nogroup", "--clear-groups", Paths.daemon, "--url", "ws://127.0.0.1:1/"]
            let r = try spawnAndWait("/usr/bin/setpriv", arguments + (socket.map { ["--socket", $0] } ?? []))
            #expect(r.status == 69)
            #expect(r.stderr.contains(expected), "\(r.stderr)")
        }
        // The binary must be reachable for nobody; where it is not (a private checkout), skip.
        let probe = try spawnAndWait("/usr/bin/setpriv", ["--reuid", "nobody", "--regid", "nogroup", "--clear-groups", Paths.daemon, "--version"])
        guard probe.status == 0 else { return }
        // A folder it may not write in, and the default /run path.
        let closed = dir.file("closed")
        #expect(mkdir(closed, 0o555) == 0)
        try refusedAsNobody(
            socket: "\(closed)/d.sock", saying: "cannot create the socket \(closed)/d.sock: permission denied; user nobody may not write in \(closed)")
        try refusedAsNobody(socket: nil, saying: "Not running as root: pass --socket")

        // A stale socket (no daemon answers) it may not remove, and a path it may not search.
        let shared = dir.file("shared")
        #expect(mkdir(shared, 0o755) == 0)
        close(try listeningUnixSocket(at: "\(shared)/stale.sock"))
        #expect(chmod("\(shared)/stale.sock", 0o777) == 0 && chmod(shared, 0o555) == 0)
        try refusedAsNobody(
            socket: "\(shared)/stale.sock",
            saying: "cannot remove the stale socket \(shared)/stale.sock (no daemon answers on it): Permission denied; user nobody may not write in \(shared)")
        let hidden = dir.file("hidden")
        #expect(mkdir(hidden, 0o700) == 0 && mkdir("\(hidden)/run", 0o777) == 0)
        try refusedAsNobody(
            socket: "\(hidden)/run/d.sock",
            saying: "cannot inspect \(hidden)/run/d.sock: Permission denied; user nobody may not search a directory on the way to \(hidden)/run/d.sock")
    }

    /// TCP_NODELAY is on for the daemon's upstream socket, read back off the live socket (a copy
    /// of its descriptor): set at the wrong level it was SO_DEBUG, which an unprivileged daemon
    /// may not set (its connects failed under systemd) and root set silently. Needs root for
    /// pidfd_getfd on the daemon's process; the daemon itself runs unprivileged.
    @Test(.enabled(if: DaemonUser.switches, "needs root to copy a descriptor out of the daemon's process"))
    func theUpstreamSocketHasTCPNoDelayAndNotSODebug() async throws {
        let dir = try TemporaryDirectory()
        let server = try await UpstreamServer(.nio)
        let daemon = try ManagedProcess.daemon(["--url", server.url, "--socket", dir.file("d.sock")])
        defer { daemon.stop() }
        #expect(await server.event("connected 1") != nil, "\(daemon.stderr.text)")
        // ss names the process and descriptor of the connection to the server's port.
        let ss = try run("/usr/bin/ss", ["-Htnp", "state", "established", "dst", "127.0.0.1:\(server.port)"]).output
        let fd = try #require(ss.firstMatch(of: /pid=\d+,fd=(\d+)/).flatMap { Int32($0.1) }, "\(ss)")
        let copy = cwsb_copy_fd_of(daemon.pid, fd)
        #expect(copy >= 0, "pidfd_getfd: \(String(cString: strerror(errno)))")
        defer { close(copy) }
        var value: Int32 = -1
        var size = socklen_t(MemoryLayout<Int32>.size)
        #expect(getsockopt(copy, Int32(IPPROTO_TCP), TCP_NODELAY, &value, &size) == 0)
        #expect(value == 1, "TCP_NODELAY is off")
        value = -1
        #expect(getsockopt(copy, SOL_SOCKET, SO_DEBUG, &value, &size) == 0)
        #expect(value == 0, "SO_DEBUG is on")
    }

    @Test func flagsStandForTheCommonSettingsWithoutAFile() async throws {
        let dir = try TemporaryDirectory()
        let server = try await UpstreamServer(.nio)
        let base = ["--url", server.url, "--socket", dir.file("d.sock")]
        let flags = base + ["-H", "Authorization: Bearer flag-token", "--subprotocol", "v2.feed", "--subprotocol", "v1.feed"]
        let daemon = try ManagedProcess.daemon(flags, name: "wsbridged")
        defer { daemon.stop() }
        #expect(await server.event("upgrade path=/ authorization=Bearer flag-token protocols=v2.feed,v1.feed") != nil, "\(server.process.stdout.text)")
        daemon.stop()

        // --token-file: read at the connect, like auth.token_file.
        let token = try dir.write("token", "from-file\n")
        let withToken = try ManagedProcess.daemon(base + ["--token-file", token], name: "wsbridged-token")
        defer { withToken.stop() }
        #expect(await server.event("upgrade path=/ authorization=Bearer from-file") != nil, "\(server.process.stdout.text)")

        // Each flag is checked by the file's rules, and says what it wants.
        let badHeader = try spawnDaemonAndWait(["--url", server.url, "--check-config", "-H", "NoColon"])
        #expect(badHeader.status == 78 && badHeader.stderr.contains("--header") && badHeader.stderr.contains("\"Name: value\""), "\(badHeader.stderr)")
        let reserved = try spawnDaemonAndWait(["--url", server.url, "--check-config", "-H", "Upgrade: h2c"])
        #expect(reserved.status == 78 && reserved.stderr.contains("set by wsbridged itself"), "\(reserved.stderr)")
        let badProxy = try spawnDaemonAndWait(["--url", server.url, "--check-config", "--proxy", "ftp://p:1"])
        #expect(badProxy.status == 78 && badProxy.stderr.contains("socks5://HOST:PORT"), "\(badProxy.stderr)")
        let badCA = try spawnDaemonAndWait(["--url", "wss://localhost/", "--check-config", "--ca-file", dir.file("nope.pem")])
        #expect(badCA.status == 78 && badCA.stderr.contains("tls.ca_file \(dir.file("nope.pem")): no such file"), "\(badCA.stderr)")
        let insecure = try spawnDaemonAndWait(["--url", "wss://localhost/", "--check-config", "--insecure"])
        #expect(insecure.status == 0, "\(insecure.stderr)")
    }

    @Test func checkConfigExplainsAnError() throws {
        let dir = try TemporaryDirectory()
        let path = try dir.write("bad.toml", "[upstream]\nurl = \"wss://feed.test/\"\n\n[heartbeat]\ninterval = \"soon\"\n")
        let (status, output) = try runDaemon(["--check-config", "--config", path], allowFailure: true)
        #expect(status == 78)
        #expect(output.contains("\(path):5: heartbeat.interval = \"soon\": must be a duration"), "\(output)")
    }

    @Test func missingConfigFileSaysWhatToDo() throws {
        let (status, output) = try runDaemon(["--check-config", "--config", "/nonexistent/wsbridged.toml"], allowFailure: true)
        #expect(status == 78)
        #expect(output.contains("/nonexistent/wsbridged.toml: cannot read the configuration file"), "\(output)")
        #expect(output.contains("--url"))
    }

    /// An empty file is no configuration (upstream.url is required); --url without a file says
    /// no file was read, where the default one does not exist.
    @Test func checkConfigSaysWhatItChecked() throws {
        let dir = try TemporaryDirectory()
        let empty = try dir.write("empty.toml", "")
        let (status, output) = try runDaemon(["--check-config", "--config", empty], allowFailure: true)
        #expect(status == 78)
        #expect(output.contains("upstream.url: is required"), "\(output)")
        #expect(try runDaemon(["--check-config", "--config", empty, "--url", "ws://127.0.0.1:9/"]).output.contains("\(empty): configuration OK"))
        if !FileManager.default.fileExists(atPath: "/etc/wsbridge/wsbridged.toml") {
            let bare = try runDaemon(["--check-config", "--url", "ws://127.0.0.1:9/"]).output
            #expect(bare.contains("configuration OK, no configuration file (/etc/wsbridge/wsbridged.toml does not exist"), "\(bare)")
        }
        // A relative --ca-file is the working directory's.
        let ca = try spawnDaemonAndWait(["--url", "wss://localhost/", "--check-config", "--ca-file", "no-such-ca.pem"])
        #expect(ca.stderr.contains("\(FileManager.default.currentDirectoryPath)/no-such-ca.pem"), "\(ca.stderr)")
    }

    @Test func badURLOverrideIsRefused() throws {
        let (status, output) = try runDaemon(["--check-config", "--url", "http://x/"], allowFailure: true)
        #expect(status == 78)
        #expect(output.contains("use ws:// or wss://"), "\(output)")
    }

    @Test func tokenIsSentReadAtEachConnectAndNeverLogged() async throws {
        let dir = try TemporaryDirectory()
        let server = try await UpstreamServer(.nio)
        let secret = "s3cr3t-\(UUID().uuidString)"
        let tokenFile = try dir.write("token", secret + "\n")
        let config = try dir.write(
            "wsbridged.toml",
            """
            [upstream]
            url = "\(server.url)"
            [auth]
            token_file = "\(tokenFile)"
            [backoff]
            base = "50ms"
            cap = "100ms"
            [reachability]
            enabled = false
            """
        )
        let daemon = try ManagedProcess.daemon(["--config", config, "--log-level", "trace", "--socket", dir.file("d.sock")])
        defer { daemon.stop() }
        #expect(await daemon.awaitLink(.open), "\(daemon.stderr.text)")
        #expect(await server.event("upgrade path=/ authorization=Bearer \(secret)") != nil)

        // Rotation: the next connect reads the new token.
        let rotated = "r0tated-\(UUID().uuidString)"
        try (rotated + "\n").write(toFile: tokenFile, atomically: true, encoding: .utf8)
        let mark = daemon.eventMark
        server.command("drop")
        #expect(await daemon.awaitLink(.open, from: mark))
        #expect(await server.event("upgrade path=/ authorization=Bearer \(rotated)") != nil)

        server.command("send hello operator")
        #expect(await daemon.stderr.wait(containing: "hello operator") != nil)
        daemon.signal(SIGTERM)
        #expect(await daemon.waitForExit() == 0)
        let logs = daemon.stderr.text + daemon.stdout.text
        #expect(!logs.contains(secret))
        #expect(!logs.contains(rotated))
        #expect(!logs.lowercased().contains("bearer"))
    }

    @Test func tokenFromASystemdCredential() async throws {
        let dir = try TemporaryDirectory()
        let server = try await UpstreamServer(.nio)
        let credentials = dir.file("credentials")
        try FileManager.default.createDirectory(atPath: credentials, withIntermediateDirectories: true)
        let secret = "cred-\(UUID().uuidString)"
        try secret.write(toFile: "\(credentials)/token", atomically: true, encoding: .utf8)
        let config = try dir.write(
            "wsbridged.toml",
            "[upstream]\nurl = \"\(server.url)\"\n[auth]\ntoken_file = \"${CREDENTIALS_DIRECTORY}/token\"\n[reachability]\nenabled = false\n"
        )
        var env = ProcessInfo.processInfo.environment
        env["CREDENTIALS_DIRECTORY"] = credentials
        let daemon = try ManagedProcess.daemon(["--config", config, "--socket", dir.file("d.sock")], environment: env)
        defer { daemon.stop() }
        #expect(await server.event("upgrade path=/ authorization=Bearer \(secret)") != nil, "\(daemon.stderr.text)")
    }

    @Test func sigtermClosesTheUpstreamWithGoingAway() async throws {
        let server = try await UpstreamServer(.python)
        let dir = try TemporaryDirectory()
        let daemon = try ManagedProcess.daemon(["--url", server.url, "--socket", dir.file("d.sock")])
        defer { daemon.stop() }
        #expect(await daemon.awaitLink(.open), "\(daemon.stderr.text)")
        daemon.signal(SIGTERM)
        #expect(await server.event("closed 1001 wsbridged shutting down") != nil)
        #expect(await daemon.waitForExit() == 0)
        #expect(daemon.stderr.text.contains("closing -> stopped"))
    }

    @Test func unreadableTokenFileIsAClearRetriedError() async throws {
        let server = try await UpstreamServer(.nio)
        let dir = try TemporaryDirectory()
        let config = try dir.write(
            "wsbridged.toml",
            """
            [upstream]
            url = "\(server.url)"
            [auth]
            token_file = "\(dir.file("missing-token"))"
            [backoff]
            base = "50ms"
            cap = "100ms"
            """
        )
        let daemon = try ManagedProcess.daemon(["--config", config, "--socket", dir.file("d.sock")])
        defer { daemon.stop() }
        // Said in status, and retried.
        try await awaitStatus(dir.file("d.sock"), "three failed attempts") { $0.failedAttempts >= 3 }
        let error = try daemonStatus(dir.file("d.sock")).lastError ?? ""
        #expect(error.contains("cannot read auth.token_file") && error.contains("No such file or directory"), "\(error)")
        // Creating the file fixes it without a restart.
        _ = try dir.write("missing-token", "late-token")
        #expect(await daemon.awaitLink(.open))
    }
}
