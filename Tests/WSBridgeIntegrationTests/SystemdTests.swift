import Foundation
import Glibc
import Testing
import WSBridgeProtocol

/// A datagram socket that receives what a service sends to NOTIFY_SOCKET (or to journald),
/// as systemd would. Each datagram becomes one entry in `messages`.
final class DatagramListener: Sendable {
    let path: String
    let messages = LineCollector(name: "datagrams")
    private let fd: Int32

    init(path: String) throws {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, socklen_t(MemoryLayout<Int32>.size))
        let r = unixSocket(fd, path, bind)
        guard r == 0 else { throw TestFailure("cannot bind \(path): \(String(cString: strerror(errno)))") }
        // Writable by anyone, as systemd's notify and journal sockets are (the daemon is not root).
        chmod(path, 0o666)
        self.fd = fd
        self.path = path
        let messages = self.messages
        let started = ContinuousClock.now
        // recv() without a control buffer: any file descriptor sent along (BARRIER=1) is closed by the kernel.
        Thread.detachNewThread {
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if n <= 0 { return }
                let elapsed = ContinuousClock.now - started
                let ms = Int(elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000)
                let text = DatagramListener.decode(Array(buffer[0..<n]))
                messages.append(Data("\(ms) \(text)\n".utf8))
            }
        }
    }

    /// Renders a datagram as one line: notify messages as they are (newlines → " | "), journal
    /// entries (with binary-length fields) decoded to NAME=value pairs joined by " | ".
    static func decode(_ bytes: [UInt8]) -> String {
        var fields: [String] = []
        var i = 0
        while i < bytes.count {
            guard let nl = bytes[i...].firstIndex(of: 0x0A) else {
                fields.append(String(decoding: bytes[i...], as: UTF8.self))
                break
            }
            let line = bytes[i..<nl]
            if line.contains(UInt8(ascii: "=")) {
                fields.append(String(decoding: line, as: UTF8.self))
                i = nl + 1
            } else {
                // NAME\n<uint64 LE length><value>\n
                let name = String(decoding: line, as: UTF8.self)
                var length = 0
                if nl + 9 <= bytes.count {
                    for k in 0..<8 { length |= Int(bytes[nl + 1 + k]) << (8 * k) }
                }
                let start = nl + 9
                guard nl + 9 <= bytes.count, length >= 0, start + length <= bytes.count else {
                    // Not a binary field: a line of text (a notification's value with a newline).
                    fields.append(String(decoding: bytes[i...], as: UTF8.self).replacingOccurrences(of: "\n", with: " | "))
                    break
                }
                fields.append(name + "=" + String(decoding: bytes[start..<start + length], as: UTF8.self))
                i = start + length + 1
            }
        }
        return fields.joined(separator: " | ")
    }

    deinit {
        shutdown(self.fd, Int32(SHUT_RDWR))
        close(self.fd)
        unlink(self.path)
    }
}

/// Running under systemd: units, notification protocol, watchdog, reload, socket activation, journal.
@Suite(.serialized) struct SystemdTests {
    @Test func unitsPassVerifyWithNoOutputAndScoreAtMost1point5() throws {
        let prefix = try TemporaryDirectory()
        // Installed as an operator would (PREFIX), so ExecStart= and the man pages exist.
        var env = ProcessInfo.processInfo.environment
        env["PREFIX"] = prefix.path
        env["SYSCONFDIR"] = prefix.file("etc")
        env["UNITDIR"] = prefix.file("units")
        env["CONFIGURATION"] = "debug"
        env["WSBRIDGE_BIN_DIR"] = Paths.bin
        env["GENERATE_MANUAL"] = ProcessInfo.processInfo.environment["GENERATE_MANUAL"] ?? "\(Paths.bin)/generate-manual"
        let install = try run("\(Paths.root)/scripts/install", [], environment: env, directory: Paths.root, allowFailure: true)
        #expect(install.status == 0, "\(install.output)")
        for file in [
            "bin/wsbridged", "bin/wsbridgectl", "share/man/man8/wsbridged.8.gz", "share/man/man1/wsbridgectl.1.gz",
            "share/bash-completion/completions/wsbridgectl", "etc/wsbridge/wsbridged.toml", "units/wsbridged.socket",
        ] {
            #expect(FileManager.default.fileExists(atPath: prefix.file(file)), "\(file) not installed")
        }

        for unit in ["wsbridged.service", "wsbridged.socket", "wsbridged@.service", "wsbridged@.socket"] {
            var venv = ProcessInfo.processInfo.environment
            venv["MANPATH"] = prefix.file("share/man")
            let (status, output) = try run("/usr/bin/systemd-analyze", ["verify", prefix.file("units/\(unit)")], environment: venv, allowFailure: true)
            #expect(status == 0, "\(unit): \(output)")
            #expect(output.isEmpty, "\(unit): systemd-analyze verify printed: \(output)")
        }
        for unit in ["wsbridged.service", "wsbridged@.service"] {
            let (_, output) = try run("/usr/bin/systemd-analyze", ["security", "--offline=yes", prefix.file("units/\(unit)")], allowFailure: true)
            let score = output.split(separator: "\n").last { $0.contains("Overall exposure level") }
                .flatMap { line in line.split(separator: ":").last?.split(separator: " ").first.flatMap { Double($0) } }
            #expect(score != nil, "\(output)")
            #expect((score ?? 10) <= 1.5, "\(unit) exposure \(score ?? -1)")
            print("measure: \(unit) exposure \(score ?? -1)")
        }
        // A second install keeps the operator's configuration and puts the new example beside it.
        try "# edited by the operator\n".write(toFile: prefix.file("etc/wsbridge/wsbridged.toml"), atomically: true, encoding: .utf8)
        #expect(try run("\(Paths.root)/scripts/install", [], environment: env, directory: Paths.root, allowFailure: true).status == 0)
        #expect((try? String(contentsOfFile: prefix.file("etc/wsbridge/wsbridged.toml"), encoding: .utf8)) == "# edited by the operator\n")
        #expect(FileManager.default.fileExists(atPath: prefix.file("etc/wsbridge/wsbridged.toml.example")))

        // uninstall removes it again, keeping the configuration.
        #expect(try run("\(Paths.root)/scripts/uninstall", [], environment: env, allowFailure: true).status == 0)
        #expect(!FileManager.default.fileExists(atPath: prefix.file("bin/wsbridged")))
        #expect(FileManager.default.fileExists(atPath: prefix.file("etc/wsbridge/wsbridged.toml")))
    }

    func startDaemon(_ dir: TemporaryDirectory, server: UpstreamServer, heartbeat: String = "30s", extraEnv: [String: String] = [:]) throws
        -> (ManagedProcess, DatagramListener, String)
    {
        let notify = try DatagramListener(path: dir.file("notify.sock"))
        let socket = dir.file("d.sock")
        let config = try dir.write("wsbridged.toml", Self.config(server: server, socket: socket, heartbeat: heartbeat))
        var env = ProcessInfo.processInfo.environment
        env["NOTIFY_SOCKET"] = notify.path
        env.merge(extraEnv) { _, new in new }
        let daemon = try ManagedProcess.daemon(["--config", config, "--log-level", "debug"], environment: env, name: "wsbridged", events: notify)
        return (daemon, notify, config)
    }

    static func config(server: UpstreamServer, socket: String, heartbeat: String) -> String {
        """
        [upstream]
        url = "\(server.url)"
        [heartbeat]
        interval = "\(heartbeat)"
        [backoff]
        base = "50ms"
        cap = "100ms"
        [reachability]
        enabled = false
        [local]
        socket = "\(socket)"
        """
    }

    @Test func notifiesReadyStatusWatchdogAndStopping() async throws {
        let dir = try TemporaryDirectory()
        let server = try await UpstreamServer(.nio)
        let (daemon, notify, _) = try self.startDaemon(dir, server: server, extraEnv: ["WATCHDOG_USEC": "400000"])
        defer { daemon.stop() }
        let ready = await notify.messages.wait(containing: "READY=1")
        #expect(ready != nil, "\(daemon.stderr.text)")
        // READY=1 means the socket listens: a client connects at once.
        let client = try SocketClient(path: dir.file("d.sock"))
        #expect(await notify.messages.wait(containing: "STATUS=open ws://127.0.0.1:\(server.port), 1 subscriber") != nil, "\(notify.messages.text)")
        let mark = notify.messages.count
        // Down until the test says so: a burst of changes is coalesced into its last STATUS=, and
        // a backoff of full jitter can last no time at all; refused attempts keep it backing off.
        server.command("refuse")
        server.command("close 1012 restart")
        #expect(await notify.messages.wait(from: mark, containing: "STATUS=backingOff") != nil)
        let down = notify.messages.count
        server.command("refuse off")
        #expect(await notify.messages.wait(from: down, containing: "STATUS=open") != nil)

        // WATCHDOG=1 at half of WATCHDOG_USEC (200 ms): wait for 8 pings and look at the spacing.
        let watchdogMark = notify.messages.count
        let pings = await notify.messages.wait(count: 8, from: watchdogMark, timeout: .seconds(30)) { $0.contains("WATCHDOG=1") }
        let times = pings.compactMap { Int($0.split(separator: " ")[0]) }
        try #require(times.count >= 8, "\(notify.messages.text)")
        let gaps = zip(times.dropFirst(), times).map { $0 - $1 }
        let median = gaps.sorted()[gaps.count / 2]
        print("measure: watchdog ping interval median \(median) ms (expected 200)")
        #expect(median >= 100 && median <= 400, "\(gaps)")

        daemon.signal(SIGTERM)
        #expect(await notify.messages.wait(containing: "STOPPING=1") != nil)
        #expect(await daemon.waitForExit() == 0)
        // The subscriber saw the stop and then end of stream.
        #expect(await client.lines.wait(containing: "\"state\":\"stopped\"") != nil)
    }

    @Test func sighupAppliesANewHeartbeatWithoutDroppingSubscribers() async throws {
        let dir = try TemporaryDirectory()
        let server = try await UpstreamServer(.nio)
        let (daemon, notify, config) = try self.startDaemon(dir, server: server, heartbeat: "30s")
        defer { daemon.stop() }
        #expect(await notify.messages.wait(containing: "READY=1") != nil)
        let client = try SocketClient(path: dir.file("d.sock"))
        #expect(await client.lines.wait(containing: "\"type\":\"hello\"") != nil)
        #expect(await daemon.awaitLink(.open))

        // A broken file first: the reload is refused and the running configuration kept.
        try "[heartbeat]\ninterval = \"soon\"\n".write(toFile: config, atomically: true, encoding: .utf8)
        let refusedMark = daemon.eventMark
        daemon.signal(SIGHUP)
        #expect(await daemon.awaitReady(from: refusedMark))
        let refused = try daemonStatus(dir.file("d.sock")).service.lastReload
        #expect(refused?.error?.contains("heartbeat.interval = \"soon\"") == true, "\(String(describing: refused))")
        let table = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", dir.file("d.sock"), "status"]).stdout
        #expect(table.contains("FAILED") && table.contains("the running configuration kept: "), "\(table)")

        try Self.config(server: server, socket: dir.file("d.sock"), heartbeat: "200ms").write(toFile: config, atomically: true, encoding: .utf8)
        let mark = notify.messages.count
        let serverMark = server.mark
        daemon.signal(SIGHUP)
        #expect(await notify.messages.wait(from: mark, containing: "RELOADING=1") != nil)
        #expect(notify.messages.lines[mark...].contains { $0.contains("MONOTONIC_USEC=") })
        #expect(await notify.messages.wait(from: mark, containing: "READY=1") != nil)
        let applied = try daemonStatus(dir.file("d.sock")).service.lastReload
        #expect(applied != nil && applied?.error == nil && applied?.restartNeeded == [], "\(String(describing: applied))")
        // The 30 s heartbeat is now 200 ms: pings arrive long before 30 s would have passed.
        #expect(await server.event("ping", from: serverMark, timeout: .seconds(10)) != nil)
        // The subscriber is still connected and served.
        server.command("send after reload")
        #expect(await client.lines.wait(containing: "after reload") != nil)
    }

    @Test func reloadNamesWhatNeedsARestart() async throws {
        let dir = try TemporaryDirectory()
        let server = try await UpstreamServer(.nio)
        let (daemon, notify, config) = try self.startDaemon(dir, server: server)
        defer { daemon.stop() }
        #expect(await notify.messages.wait(containing: "READY=1") != nil)
        let text = Self.config(server: server, socket: dir.file("d.sock"), heartbeat: "30s") + "\nmax_line = 4096\n"
        try text.write(toFile: config, atomically: true, encoding: .utf8)
        let mark = daemon.eventMark
        daemon.signal(SIGHUP)
        #expect(await daemon.awaitReady(from: mark))
        let reload = try daemonStatus(dir.file("d.sock")).service.lastReload
        #expect(reload?.error == nil && reload?.restartNeeded == ["local.max_line"], "\(String(describing: reload))")
        let table = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", dir.file("d.sock"), "status"]).stdout
        #expect(table.contains("restart needed for local.max_line"), "\(table)")
    }

    @Test func aReloadThatMovesTheSocketStillRemovesTheOneBoundAtStop() async throws {
        let dir = try TemporaryDirectory()
        let server = try await UpstreamServer(.nio)
        let (daemon, notify, config) = try self.startDaemon(dir, server: server)
        defer { daemon.stop() }
        #expect(await notify.messages.wait(containing: "READY=1") != nil)
        // Another daemon's live socket sits at the path the reloaded file names.
        let other = dir.file("other.sock")
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        let bound = unixSocket(fd, other, bind)
        #expect(bound == 0)
        try Self.config(server: server, socket: other, heartbeat: "30s").write(toFile: config, atomically: true, encoding: .utf8)
        let mark = daemon.eventMark
        daemon.signal(SIGHUP)
        #expect(await daemon.awaitReady(from: mark))
        #expect(try daemonStatus(dir.file("d.sock")).service.lastReload?.restartNeeded == ["local.socket"])
        daemon.signal(SIGTERM)
        #expect(await daemon.waitForExit() == 0)
        #expect(FileManager.default.fileExists(atPath: other), "the other daemon's socket was removed")
        #expect(!FileManager.default.fileExists(atPath: dir.file("d.sock")), "our own socket was left behind")
    }

    @Test func socketActivationStartsTheDaemonOnFirstConnect() async throws {
        let dir = try TemporaryDirectory()
        let server = try await UpstreamServer(.nio)
        let path = dir.file("activated.sock")
        let activator = try ManagedProcess(
            "/usr/bin/systemd-socket-activate",
            ["-l", path, "--fdname=wsbridged"] + daemonCommand(["--url", server.url, "--socket", dir.file("unused.sock"), "--log-level", "debug"]),
            name: "systemd-socket-activate"
        )
        defer { activator.stop() }
        #expect(await activator.stderr.wait(containing: "Listening on") != nil, "\(activator.stderr.text)")
        // Nothing connected yet: the daemon has not started, so the upstream saw no one.
        #expect(await server.event("upgrade", timeout: .milliseconds(300)) == nil)
        let client = try SocketClient(path: path)
        #expect(await client.lines.wait(containing: "\"type\":\"hello\"") != nil, "\(activator.stderr.text)")
        #expect(await activator.stderr.wait(containing: "listening on the socket passed by systemd") != nil)
        #expect(activator.stderr.text.contains("local.fdname=wsbridged"))
        #expect(await server.event("upgrade") != nil)
        // It did not bind its own path.
        #expect(!FileManager.default.fileExists(atPath: dir.file("unused.sock")))
        client.send("{\"id\":\"s\",\"op\":\"status\"}")
        #expect(await client.reply("s")?["ok"] == true)
    }

    @Test(.enabled(if: !FileManager.default.fileExists(atPath: "/run/systemd/journal/socket") && getuid() == 0, "needs root and no running journald"))
    func logsGoToTheJournalAsStructuredEntries() async throws {
        try FileManager.default.createDirectory(atPath: "/run/systemd/journal", withIntermediateDirectories: true)
        let journal = try DatagramListener(path: "/run/systemd/journal/socket")
        defer { try? FileManager.default.removeItem(atPath: "/run/systemd/journal") }
        let dir = try TemporaryDirectory()
        let server = try await UpstreamServer(.nio)
        let secret = "journal-secret-\(UUID().uuidString)"
        let token = try dir.write("token", secret)
        let config = try dir.write(
            "wsbridged.toml",
            "[upstream]\nurl = \"\(server.url)\"\n[auth]\ntoken_file = \"\(token)\"\n[local]\nsocket = \"\(dir.file("d.sock"))\"\n[reachability]\nenabled = false\n"
        )
        let daemon = try ManagedProcess.daemon(["--config", config, "--log-level", "trace"], journalStream: true)
        defer { daemon.stop() }
        let entry = await journal.messages.wait(containing: "MESSAGE=state connecting -> open")
        #expect(entry != nil, "\(daemon.stderr.text)")
        let fields = entry.map { Set($0.split(separator: " | ").map(String.init)) } ?? []
        #expect(fields.contains("PRIORITY=5"))
        #expect(fields.contains("SYSLOG_IDENTIFIER=wsbridged"))
        #expect(fields.contains("STATE_TO=open"))
        #expect(fields.contains { $0.hasPrefix("CODE_FILE=") && $0.contains("UpstreamLink.swift") })
        #expect(fields.contains { $0.hasPrefix("CODE_LINE=") })
        #expect(fields.contains("UPSTREAM_URL=\(server.url)"))
        server.command("send traced")
        #expect(await journal.messages.wait(containing: "traced") != nil)
        daemon.signal(SIGTERM)
        #expect(await daemon.waitForExit() == 0)
        // Everything went to the journal; no secret in any field.
        #expect(daemon.stderr.text.isEmpty, "\(daemon.stderr.text)")
        #expect(!journal.messages.text.contains(secret))
        #expect(await server.event("upgrade path=/ authorization=Bearer \(secret)") != nil)
    }
}
