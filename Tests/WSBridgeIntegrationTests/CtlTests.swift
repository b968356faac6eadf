import Foundation
import Glibc
import Testing
import WSBridgeProtocol

/// `wsbridgectl` against a real daemon, and its help texts against golden files.
@Suite struct CtlTests {
    static var ctl: String { "\(Paths.bin)/wsbridgectl" }

    func ctl(_ arguments: [String], socket: String?, stdin: String? = nil) throws -> (status: Int32, out: String, err: String) {
        var env = ProcessInfo.processInfo.environment
        env["WSBRIDGE_SOCKET"] = nil
        env["TZ"] = "UTC"
        env["COLUMNS"] = "80"
        let r = try spawnAndWait(Self.ctl, (socket.map { ["--socket", $0] } ?? []) + arguments, environment: env, stdin: stdin ?? "")
        return (r.status, r.stdout, r.stderr)
    }

    @Test func statusSendCloseConnect() async throws {
        let f = try await DaemonFixture()
        let status = try self.ctl(["status"], socket: f.socket)
        #expect(status.status == 0, "\(status.err)")
        // Labels padded to the longest possible one ("failed attempts"), the same in every call.
        #expect(status.out.contains("state            open since"), "\(status.out)")
        #expect(status.out.contains("upstream         \(f.server.url)"))
        // Its own connection is not counted.
        #expect(status.out.contains("clients          0 connected, 0 subscribed"), "\(status.out)")
        // The row is there before the first pong, saying why it has no figure.
        #expect(status.out.contains("rtt              "), "\(status.out)")
        #expect(status.out.contains("version          \(WSBridgeVersion.current)"), "\(status.out)")

        let json = try self.ctl(["status", "--json"], socket: f.socket)
        #expect((try? JSONValue.parse(json.out.trimmingCharacters(in: .whitespacesAndNewlines)))?["state"] == "open")

        #expect(try self.ctl(["send", "hello", "from", "ctl"], socket: f.socket).out == "sent\n")
        #expect(await f.server.event("message hello from ctl") != nil)
        #expect(try self.ctl(["send"], socket: f.socket, stdin: "line one\nline two\n").out == "sent\nsent\n")
        #expect(await f.server.event("message line two") != nil)

        let closed = try self.ctl(["close", "--code", "4002", "--reason", "ctl says so"], socket: f.socket)
        #expect(closed.status == 0)
        #expect(closed.out == "closing the link; it stays closed until `wsbridgectl connect`\n", "\(closed.out)")
        #expect(await f.server.event("closed 4002 ctl says so") != nil)
        #expect(await f.daemon.awaitLink(.idle))
        let queued = try self.ctl(["send", "later"], socket: f.socket)
        #expect(queued.out == "queued until the link opens (1 waiting; the link is closed)\n", "\(queued.out)")
        let down = try self.ctl(["status"], socket: f.socket).out
        #expect(down.contains("state            closed since"), "\(down)")
        #expect(down.contains("last close       by an operator (wsbridgectl close), code 4002: ctl says so"), "\(down)")
        #expect(down.contains("rtt              none (the link is not open)"), "\(down)")
        // No internal names in the readable text.
        for name in ["idle", "backingOff", "waitingForNetwork", "by user", "code -"] { #expect(!down.contains(name), "\(name): \(down)") }
        let again = try self.ctl(["close"], socket: f.socket)
        #expect(again.out == "the link was already closed; it stays closed until `wsbridgectl connect`\n", "\(again.out)")
        let reopening = f.daemon.eventMark
        #expect(try self.ctl(["connect"], socket: f.socket).status == 0)
        #expect(await f.server.event("message later") != nil)
        #expect(await f.daemon.awaitLink(.open, from: reopening))
        #expect(try self.ctl(["connect"], socket: f.socket).out == "the link is already open\n")
        let reopened = f.daemon.eventMark
        let reconnect = try self.ctl(["reconnect"], socket: f.socket)
        #expect(reconnect.status == 0)
        #expect(reconnect.out.hasPrefix("reconnecting (now "), "\(reconnect.out)")
        #expect(await f.daemon.awaitLink(.open, from: reopened))
        let after = try self.ctl(["status"], socket: f.socket).out
        #expect(after.contains("last close       by an operator (wsbridgectl reconnect), code 1000\n"), "\(after)")
    }

    /// A field the table has no row for (a newer daemon's) is shown as it is, not dropped; the
    /// fields it words are not shown twice.
    @Test func aStatusFieldTheTableHasNoRowForIsShownAsItIs() throws {
        let dir = try TemporaryDirectory()
        var status = StatusReport()
        (status.state, status.url, status.traffic.messagesIn, status.traffic.bytesIn) = (.open, "ws://127.0.0.1:9/", 3, 2048)
        status.service.metricsUrl = "http://127.0.0.1:9/metrics"
        guard case .object(var fields) = status.json else { throw ScriptedDaemon.Failure.notAnObject }
        fields.insert(("pings_sent", 12), at: 3)
        fields.append(("peer_limits", ["max_frame": 65536]))
        fields.append(("not_yet", .null))
        let reply: JSONValue = ["type": "reply", "id": 1, "ok": true, "result": .object(fields)]
        try ScriptedDaemon.start(at: dir.file("d.sock"), lines: [reply.serialized])
        let r = try self.ctl(["status"], socket: dir.file("d.sock"))
        #expect(r.status == 0, "\(r.err)")
        #expect(r.out.contains("\npings sent       12\n"), "\(r.out)")
        #expect(r.out.contains("\n" + #"peer limits      {"max_frame":65536}"# + "\n"), "\(r.out)")
        #expect(r.out.contains("\nmessages in      3 (2.0 KiB)\n") && r.out.contains("\nmetrics          http://127.0.0.1:9/metrics\n"), "\(r.out)")
        for worded in ["messages_in", "bytes_in", "metrics url", "bytes in", "not yet", "last error reason"] {
            #expect(!r.out.contains(worded), "\(worded): \(r.out)")
        }
    }

    /// docs/protocol.md's one-shot socat recipes end while the feed flows (a new client is
    /// subscribed, and socat ends only after half a second without data).
    @Test func theProtocolDocsOneShotRecipesEndWhileTheFeedFlows() async throws {
        let f = try await DaemonFixture(serverArguments: ["--ticker", "50"])
        let doc = try String(contentsOfFile: "\(Paths.root)/docs/protocol.md", encoding: .utf8)
        let recipe = try #require(doc.split(separator: "\n").first { $0.hasPrefix("printf") && $0.contains(#""op":"status""#) })
        let command = recipe.replacingOccurrences(of: "/run/wsbridged/wsbridged.sock", with: f.socket)
        let r = try spawnAndWait("/usr/bin/timeout", ["20", "/bin/sh", "-c", command])
        #expect(r.status == 0, "timed out or failed: \(r.stderr)")
        #expect(r.stdout.contains(#""type":"reply","id":1,"ok":true"#), "\(r.stdout)")
    }

    @Test func binarySendFromStandardInput() async throws {
        let f = try await DaemonFixture()
        let r = try self.ctl(["send", "--binary"], socket: f.socket, stdin: "\u{0}\u{1}binary")
        #expect(r.out == "sent\n", "\(r.err)")
        #expect(await f.server.event("binary 8") != nil)
    }

    /// For text that is not JSON (a raw feed's `42["ev",…]`, `MSG …`), filters on the whole text.
    @Test func tailFiltersAnyTextByPrefixOrContents() async throws {
        let f = try await DaemonFixture()
        let prefix = try ManagedProcess(Self.ctl, ["--socket", f.socket, "tail", "--prefix", "42[\"trade"], name: "prefix")
        defer { prefix.stop() }
        let contains = try ManagedProcess(Self.ctl, ["--socket", f.socket, "tail", "--contains", "BTC"], name: "contains")
        defer { contains.stop() }
        #expect(await prefix.stderr.wait(containing: "only text beginning \"42[\\\"trade\"") != nil, "\(prefix.stderr.text)")
        #expect(await contains.stderr.wait(containing: "only text containing \"BTC\"") != nil)
        for text in ["2", #"42["quote",{"s":"BTC"}]"#, #"42["trade",{"s":"ETH"}]"#, "MSG BTC.trades 1 5", #"42["trade",{"s":"BTC"}]"#] {
            f.server.command("send \(text)")
        }
        #expect(await prefix.stdout.wait(containing: #"{"s":"BTC"}]"#) != nil)
        #expect(prefix.stdout.lines == [#"42["trade",{"s":"ETH"}]"#, #"42["trade",{"s":"BTC"}]"#], "\(prefix.stdout.text)")
        #expect(await contains.stdout.wait(containing: #"42["trade",{"s":"BTC"}]"#) != nil)
        #expect(contains.stdout.lines == [#"42["quote",{"s":"BTC"}]"#, "MSG BTC.trades 1 5", #"42["trade",{"s":"BTC"}]"#])
        // One kind of filter at a time.
        let both = try self.ctl(["tail", "--prefix", "a", "--contains", "b"], socket: f.socket)
        #expect(both.err.contains("give one of --filter, --prefix and --contains"))
    }

    @Test func tailFollowsWithFilterAndSince() async throws {
        let f = try await DaemonFixture()
        let tail = try ManagedProcess(Self.ctl, ["--socket", f.socket, "tail", "--filter", "n=3"], name: "tail")
        defer { tail.stop() }
        let json = try ManagedProcess(Self.ctl, ["--socket", f.socket, "tail", "--json", "--since", "0"], name: "tail-json")
        defer { json.stop() }
        // Each says on stderr once it is subscribed.
        #expect(await tail.stderr.wait(containing: "following \(f.socket): new messages from seq 1, only n=3") != nil)
        #expect(await json.stderr.wait(containing: "following") != nil)
        f.server.command("burst 5")
        let line = await tail.stdout.wait(containing: "\"n\":3")
        #expect(line?.hasPrefix("{\"n\":3,") == true)
        #expect(await json.stdout.wait(containing: "\"seq\":5,") != nil)
        #expect(tail.stdout.lines.count == 1)

        // --since 2 with seq 5 the last: says it replays from 3, and does.
        let resumed = try ManagedProcess(Self.ctl, ["--socket", f.socket, "tail", "--json", "--since", "2"], name: "tail-since")
        defer { resumed.stop() }
        #expect(await resumed.stderr.wait(containing: "replaying from seq 3 (as far as still buffered) up to 5, then new messages") != nil)
        #expect(await resumed.stdout.wait(containing: "\"seq\":5,") != nil)
        #expect(resumed.stdout.lines.first?.contains("\"seq\":3,") == true, "\(resumed.stdout.lines)")
    }

    @Test func requestPrintsTheMatchingAnswer() async throws {
        let f = try await DaemonFixture()
        let r = try self.ctl(["request", "{\"rid\":41,\"q\":1}", "--match", "rid=41", "--timeout", "5"], socket: f.socket)
        #expect(r.status == 0, "\(r.err)")
        #expect(r.out == "{\"rid\":41,\"q\":1}\n")
        let t = try self.ctl(["request", "{\"rid\":1}", "--match", "rid=2", "--timeout", "0.2"], socket: f.socket)
        #expect(t.status == 1)
        #expect(t.err.contains("(timeout)"))
        // A timeout the daemon does not take is its to refuse, saying what it accepts; none
        // makes the CLI trap.
        let huge = try self.ctl(["request", "{\"rid\":1}", "--match", "rid=1", "--timeout", "1e12"], socket: f.socket)
        #expect(huge.status != 0 && huge.err.contains("at most 3600 seconds"), "\(huge.err)")
        let nan = try self.ctl(["request", "{\"rid\":1}", "--match", "rid=1", "--timeout", "nan"], socket: f.socket)
        #expect(nan.status == 64 && nan.err.contains("--timeout takes a number of seconds"), "\(nan.err)")
    }

    @Test func daemonNotRunningHasItsOwnExitCode() throws {
        let r = try self.ctl(["status"], socket: "/run/wsbridged/wsbridged.sock")
        #expect(r.status == 69)
        #expect(r.err.contains("wsbridged is not running"))
        #expect(r.err.contains("systemctl start wsbridged.socket"), "\(r.err)")
        #expect(try self.ctl(["status"], socket: "/run/wsbridged/feed2.sock").err.contains("systemctl start wsbridged@feed2.socket"))
        // A path of one's own: no systemctl, but how to start a daemon there.
        let own = try self.ctl(["status"], socket: "/nonexistent/mine.sock")
        #expect(own.status == 69)
        #expect(!own.err.contains("systemctl"), "\(own.err)")
        #expect(own.err.contains("wsbridged --socket /nonexistent/mine.sock"), "\(own.err)")
    }

    @Test(.enabled(if: getuid() == 0, "needs root to act as another user"))
    func permissionDeniedHasItsOwnExitCode() async throws {
        let f = try await DaemonFixture(extraConfig: "mode = \"0600\"")
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: f.dir.path)
        let r = try run(
            "/usr/bin/setpriv", ["--reuid", "nobody", "--regid", "nogroup", "--clear-groups", Self.ctl, "--socket", f.socket, "status"], allowFailure: true)
        #expect(r.status == 77)
        #expect(r.output.contains("permission denied"))
        // With the socket open to all, nobody may read but not write.
        try FileManager.default.setAttributes([.posixPermissions: 0o666], ofItemAtPath: f.socket)
        let forbidden = try run(
            "/usr/bin/setpriv", ["--reuid", "nobody", "--regid", "nogroup", "--clear-groups", Self.ctl, "--socket", f.socket, "send", "x"], allowFailure: true)
        #expect(forbidden.status == 77)
        #expect(forbidden.output.contains("(forbidden)"))
    }

    @Test func instanceNamesTheTemplatesSocket() throws {
        // No daemon there: the message names the socket and the instance's unit.
        let r = try self.ctl(["--instance", "feed-\(getpid())", "status"], socket: nil)
        #expect(r.status == 69)
        #expect(r.err.contains("nothing listens on /run/wsbridged/feed-\(getpid()).sock"), "\(r.err)")
        #expect(r.err.contains("systemctl start wsbridged@feed-\(getpid())"), "\(r.err)")
        #expect(try self.ctl(["--instance", "a/b", "status"], socket: nil).status == 64)
        #expect(try self.ctl(["--instance", "x", "status"], socket: "/tmp/y.sock").err.contains("give one"))
    }

    @Test func aMistypedCommandGetsTheClosestOne() throws {
        let r = try self.ctl(["stauts"], socket: "/nonexistent.sock")
        #expect(r.status == 64)
        #expect(r.err.contains("unknown command 'stauts': did you mean 'status'?"), "\(r.err)")
        // Options and their values before it are skipped.
        #expect(try self.ctl(["--json", "metrcs"], socket: "/nonexistent.sock").err.contains("did you mean 'metrics'?"))
        // A word close to none: named, with every command listed, and no usage of `status`.
        let bogus = try self.ctl(["bogus"], socket: "/nonexistent.sock")
        #expect(bogus.status == 64)
        #expect(
            bogus.err
                == "wsbridgectl: unknown command 'bogus'. The commands are status, metrics, send, sticky, unstick, close, connect, reconnect, tail, request, journal, subscriptions, top (wsbridgectl COMMAND --help for one).\n",
            "\(bogus.err)")
        #expect(!bogus.err.contains("Usage"))
        // `help` is ArgumentParser's: it still works.
        #expect(try self.ctl(["help", "send"], socket: nil).out.contains("OVERVIEW: Send a message upstream"))
    }

    @Test func usageErrorsExit64() throws {
        let r = try self.ctl(["send", "--binary", "text"], socket: nil)
        #expect(r.status == 64)
        #expect(r.err.contains("--binary reads standard input"))
    }

    static let goldenCommands: [[String]] = [
        ["--help"], ["status", "--help"], ["metrics", "--help"], ["send", "--help"], ["close", "--help"], ["connect", "--help"],
        ["reconnect", "--help"], ["tail", "--help"], ["request", "--help"], ["sticky", "--help"], ["unstick", "--help"], ["journal", "--help"],
        ["subscriptions", "--help"], ["top", "--help"],
    ]

    @Test(arguments: Self.goldenCommands)
    func helpTextMatchesGolden(_ arguments: [String]) throws {
        let r = try self.ctl(arguments, socket: nil)
        #expect(r.status == 0)
        let name = arguments.count == 1 ? "wsbridgectl" : "wsbridgectl-\(arguments[0])"
        let path = "\(Paths.root)/Tests/WSBridgeIntegrationTests/Golden/\(name).txt"
        if ProcessInfo.processInfo.environment["WSBRIDGE_UPDATE_GOLDEN"] == "1" {
            try r.out.write(toFile: path, atomically: true, encoding: .utf8)
        }
        let golden = try String(contentsOfFile: path, encoding: .utf8)
        #expect(r.out == golden, "help for \(arguments) changed; rerun with WSBRIDGE_UPDATE_GOLDEN=1 if intended")
    }

    @Test(arguments: ["bash", "zsh", "fish"])
    func shellCompletionsNameEverySubcommand(_ shell: String) throws {
        let r = try self.ctl(["--generate-completion-script", shell], socket: nil)
        #expect(r.status == 0)
        for sub in ["status", "metrics", "send", "sticky", "unstick", "close", "connect", "reconnect", "tail", "request", "journal"] {
            #expect(r.out.contains(sub))
        }
    }
}

extension CtlTests {
    /// A daemon whose status reply wsbridgectl cannot read (another protocol version, here a
    /// byte count as a string): one line saying what to do, and exit code 76.
    @Test func aReplyOfAnotherProtocolSaysWhichWsbridgectlToUse() async throws {
        let dir = try TemporaryDirectory()
        let socket = dir.file("odd.sock")
        let script = """
            import json, socket, sys
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(sys.argv[1]); s.listen(1); print("listening", flush=True)
            c, _ = s.accept(); f = c.makefile("rwb")
            f.write(b'{"type":"hello","protocol":1,"state":"open","seq":0,"stream":"x","subscribed":false,"write":true}\\n'); f.flush()
            for line in f:
                request = json.loads(line)
                result = {"state": "open", "queue": {"max_bytes": "lots"}} if request.get("op") == "status" else {}
                reply = {"type": "reply", "id": request.get("id"), "ok": True, "result": result}
                f.write((json.dumps(reply) + "\\n").encode()); f.flush()
            """
        let server = try ManagedProcess(Paths.python, ["-c", script, socket], name: "odd")
        defer { server.stop() }
        #expect(await server.stdout.wait(containing: "listening") != nil)
        let r = try self.ctl(["status"], socket: socket)
        #expect(r.status == 76, "\(r.out)\(r.err)")
        #expect(r.err.contains("queue.max_bytes") && r.err.contains("use the wsbridgectl that came with the running wsbridged"), "\(r.err)")
    }
}

/// A Unix socket that greets like wsbridged and sends `lines` to the one client it accepts,
/// reading what the client sends until it hangs up: what the CLI makes of a given reply.
enum ScriptedDaemon {
    enum Failure: Error {
        case notAnObject
    }

    static func start(at path: String, lines: [String]) throws {
        let fd = try listeningUnixSocket(at: path)
        let hello = #"{"type":"hello","protocol":1,"version":"0.0.0","state":"open","seq":0,"stream":"0","subscribed":false,"write":true}"#
        let text = ([hello] + lines).map { $0 + "\n" }.joined()
        Thread.detachNewThread {
            let client = accept(fd, nil, nil)
            close(fd)
            guard client >= 0 else { return }
            _ = text.withCString { write(client, $0, strlen($0)) }
            var buffer = [UInt8](repeating: 0, count: 4096)
            while read(client, &buffer, buffer.count) > 0 {}
            close(client)
        }
    }
}
