import Foundation
import Glibc
import Testing
import WSBridgeProtocol

/// The WebSocket face (`[local.websocket]`, docs/websocket.md) with `upstream.protocol = "raw"`:
/// apps written with stock WebSocket libraries (PyPI's `websockets`, Debian's Node `ws`), on
/// loopback TCP and on a Unix socket, against the daemon run as its users run it.
@Suite(.serialized) struct WebSocketFaceTests {
    /// A daemon whose face listens on a free loopback port and on `ws.sock` beside its socket.
    struct Face {
        let fixture: DaemonFixture
        let port: Int
        var url: String { "ws://127.0.0.1:\(self.port)/" }
        var socket: String { self.fixture.dir.file("ws.sock") }

        init(_ face: String = "", local: String = "", after: String = "") async throws {
            let port = try freePort()
            self.port = port
            let dir = try TemporaryDirectory()
            self.fixture = try await DaemonFixture(
                extraConfig: "\(local)\n[local.websocket]\nlisten = \"127.0.0.1:\(port)\"\nsocket = \"\(dir.path)/ws.sock\"\n\(face)\n\(after)",
                directory: dir)
        }

        /// An app of PyPI's `websockets` (Tests/peers/ws_app.py); `as user`: run as that user.
        func app(_ arguments: [String] = [], unix: Bool = false, as user: String? = nil, name: String = "app") throws -> ManagedProcess {
            let command =
                [Paths.python, "-u", "\(Paths.root)/Tests/peers/ws_app.py", unix ? "ws://localhost/" : self.url] + (unix ? ["--unix", self.socket] : [])
                + arguments
            let run = user.map { ["/usr/bin/setpriv", "--reuid", $0, "--regid", "nogroup", "--clear-groups"] + command } ?? command
            return try ManagedProcess(run[0], Array(run.dropFirst()), name: name)
        }

        /// An app of Node's `ws` over `ws+unix:` (Tests/peers/ws_node_app.js).
        func nodeApp() throws -> ManagedProcess {
            try ManagedProcess(
                "/usr/bin/node", ["\(Paths.root)/Tests/peers/ws_node_app.js", self.socket],
                environment: ProcessInfo.processInfo.environment.merging(["NODE_PATH": "/usr/share/nodejs"]) { $1 }, name: "node")
        }
    }

    /// The number of each `{"n":N,...}` (or `{"tick":N,...}`) message an app printed, in order.
    static func numbers(_ app: ManagedProcess) -> [Int] {
        app.stdout.lines.compactMap { line in
            guard line.hasPrefix("message "), let json = try? JSONValue.parse(String(line.dropFirst(8))) else { return nil }
            return (json.value(at: "n") ?? json.value(at: "tick"))?.intValue
        }
    }

    /// Whether `numbers` are 1 to `count` (all of them when nil), once each and in order; else what
    /// is wrong with them.
    static func problem(_ numbers: [Int], _ count: Int? = nil) -> String? {
        if let count, numbers.count != count { return "\(numbers.count) of \(count) messages, the last \(numbers.last ?? 0)" }
        guard let wrong = numbers.indices.first(where: { numbers[$0] != $0 + 1 }) else { return nil }
        return "message \(wrong + 1) of \(numbers.count) is number \(numbers[wrong])"
    }

    @Test func appsOnTCPAndUnixEachGetEveryMessageOnceInOrderAndTheirMessagesGoUpstream() async throws {
        let face = try await Face()
        let tcp = try face.app(name: "tcp")
        let unix = try face.app(unix: true, name: "unix")
        let node = try face.nodeApp()
        defer { for app in [tcp, unix, node] { app.stop() } }
        for app in [tcp, unix, node] {
            #expect(await app.stdout.wait(containing: "open") != nil, "\(app.stdout.text) \(app.stderr.text)")
        }
        face.fixture.server.command("burst 300 200")
        for app in [tcp, unix, node] {
            _ = await app.stdout.wait(count: 300) { $0.hasPrefix("message ") }
            let problem = Self.problem(Self.numbers(app), 300)
            #expect(problem == nil, "\(problem ?? ""): \(app.stdout.lines.suffix(3)) \(app.stderr.text)")
        }
        // status and clients show them beside the NDJSON clients.
        let control = try await face.fixture.client(name: "control")
        control.send("{\"id\":\"s\",\"op\":\"status\"}")
        #expect(await control.reply("s")?.value(at: "result.websocket.apps")?.intValue == 3)
        control.send("{\"id\":\"m\",\"op\":\"metrics\"}")
        let metrics = await control.reply("m")?.value(at: "result.text")?.stringValue ?? ""
        #expect(metrics.split(separator: "\n").contains("wsbridge_websocket_apps 3.0"), "\(metrics.split(separator: "\n").filter { $0.contains("websocket") })")
        control.send("{\"id\":\"c\",\"op\":\"clients\"}")
        guard case .array(let listed)? = await control.reply("c")?.value(at: "result.clients") else {
            Issue.record("no clients reply")
            return
        }
        let apps = listed.filter { $0["face"] == "websocket" }
        #expect(apps.count == 3, "\(listed)")
        let overTCP = apps.first { $0["address"]?.stringValue?.hasPrefix("tcp 127.0.0.1:") == true }
        #expect(overTCP?["uid"]?.intValue == Int(getuid()) && overTCP?["path"] == "/", "\(apps)")
        #expect(overTCP?["user_agent"]?.stringValue?.contains("websockets") == true, "\(apps)")
        #expect(apps.filter { $0["address"] == "unix" }.allSatisfy { $0["pid"] != nil }, "\(apps)")
        tcp.send("send from-python-over-tcp")
        node.send("send from-node-over-unix")
        #expect(await face.fixture.server.event("message from-python-over-tcp") != nil)
        #expect(await face.fixture.server.event("message from-node-over-unix") != nil)
        // The upstream echoes each to everyone: every app gets both, once.
        for app in [tcp, unix, node] {
            for text in ["message from-node-over-unix", "message from-python-over-tcp"] {
                #expect(await app.stdout.wait(containing: text) != nil, "\(app.stdout.lines.suffix(3))")
                #expect(app.stdout.lines.filter { $0 == text }.count == 1)
            }
        }
    }

    @Test func checkConfigSaysWhereTheFaceListens() throws {
        let dir = try TemporaryDirectory()
        let config = try dir.write(
            "face.toml", "[upstream]\nurl = \"ws://127.0.0.1:9/\"\n[local.websocket]\nlisten = \"127.0.0.1:8765\"\nsocket = \"/run/wsbridged/ws.sock\"\n")
        let output = try runDaemon(["--check-config", "--config", config]).output
        #expect(
            output.contains("configuration OK (upstream ws://127.0.0.1:9/; WebSocket face on ws://127.0.0.1:8765/ and ws+unix:/run/wsbridged/ws.sock)"),
            "\(output)")
    }

    @Test func aRequestTheFaceDoesNotServeIsAnsweredWithWhy() async throws {
        let face = try await Face("allowed_origins = [\"http://localhost:3000\"]")
        let path = try face.app(["--origin", "http://localhost:3000"], name: "path")
        defer { path.stop() }
        let wrong = try ManagedProcess(
            Paths.python, ["-u", "\(Paths.root)/Tests/peers/ws_app.py", "ws://127.0.0.1:\(face.port)/elsewhere"], name: "wrong-path")
        let origin = try face.app(["--origin", "http://evil.example"], name: "origin")
        defer { for app in [wrong, origin] { app.stop() } }
        let refusedPath = await wrong.stdout.wait(containing: "refused")
        #expect(refusedPath?.hasPrefix("refused 404 no WebSocket at /elsewhere: local.websocket.paths are /") == true, "\(wrong.stdout.text)")
        let refusedOrigin = await origin.stdout.wait(containing: "refused")
        #expect(refusedOrigin == "refused 403 origin http://evil.example is not in local.websocket.allowed_origins: add it there to let its pages connect")
        #expect(await path.stdout.wait(containing: "open") != nil, "an allowed origin connects: \(path.stdout.text)")
        // Plain HTTP is told what the port is.
        let curl = try ManagedProcess("/usr/bin/curl", ["-s", "-i", "http://127.0.0.1:\(face.port)/"], name: "curl")
        #expect(await curl.waitForExit() == 0)
        #expect(curl.stdout.text.contains("426 Upgrade Required") && curl.stdout.text.contains("connect with a WebSocket client"), "\(curl.stdout.text)")
    }

    /// A raw app counts its frames from the Wsbridge-Seq its upgrade was answered with, and after
    /// a reconnect resumes with `?stream=ID&since=SEQ`: what came while it was away, from the
    /// replay ring, then the live feed, nothing missed or twice. A resume the ring cannot serve
    /// (another stream, a seq it no longer holds) is refused with 410 and why.
    @Test func aRawAppResumesAfterItsReconnectFromTheSeqItCounted() async throws {
        // inline_json: the ring's lines carry a text payload as JSON, not as its text, and a
        // resume from them writes it out again.
        let face = try await Face(local: "replay = 150\ninline_json = true")
        let first = try face.app(name: "first")
        defer { first.stop() }
        guard let position = await first.stdout.wait(containing: "position "), case let parts = position.split(separator: " "), parts.count == 3,
            let start = UInt64(parts[2])
        else { throw TestFailure("no position: \(first.stdout.text) \(first.stderr.text)") }
        let stream = String(parts[1])
        face.fixture.server.command("burst 100 50")
        _ = await first.stdout.wait(count: 100) { $0.hasPrefix("message ") }
        #expect(Self.problem(Self.numbers(first), 100) == nil)
        first.stop()
        _ = await first.waitForExit()
        // Only the face's app was there: the ring kept its frames, and an NDJSON consumer that
        // asks for them gets each as its line (its seq, its data).
        let control = try await face.fixture.client(name: "control")
        control.send(#"{"id":"s","op":"subscribe","since":\#(start)}"#)
        let replayed = await control.lines.wait(count: 100) { $0.contains(#""type":"message""#) }
        let lines = replayed.compactMap { try? JSONValue.parse($0) }
        #expect(lines.map { $0["seq"]?.intValue ?? 0 } == Array(Int(start) + 1...Int(start) + 100), "\(replayed.prefix(2))")
        #expect(
            lines.compactMap { $0["json"]?["n"]?.intValue } == Array(1...100) && lines.allSatisfy { $0["kind"] == "text" && $0["ts"] != nil },
            "\(replayed.prefix(2))")
        // While it is away: 100 more, of which it will want all.
        let mark = control.lines.count
        face.fixture.server.command("burst 100 50")
        _ = await control.lines.wait(count: 100, from: mark) { $0.contains(#""type":"message""#) }
        let again = try face.app(["--query", "stream=\(stream)&since=\(start + 100)"], name: "again")
        defer { again.stop() }
        _ = await again.stdout.wait(count: 100) { $0.hasPrefix("message ") }
        let missed = Self.numbers(again)
        #expect(missed == Array(101...200), "\(missed.prefix(3))…\(missed.suffix(3)) \(again.stderr.text)")
        #expect(await again.stdout.wait(containing: "position \(stream) \(start + 100)") != nil)
        face.fixture.server.command("burst 300 50")
        _ = await again.stdout.wait(count: 400) { $0.hasPrefix("message ") }
        #expect(Self.problem(Self.numbers(again).map { $0 - 100 }, 400) == nil, "live after the backlog, in order")
        // What cannot be resumed: said, not guessed.
        let gone = try face.app(["--query", "stream=\(stream)&since=\(start + 1)"], name: "gone")
        let other = try face.app(["--query", "stream=elsewhere&since=\(start + 1)"], name: "other")
        defer { for app in [gone, other] { app.stop() } }
        #expect(await gone.stdout.wait(containing: "refused")?.hasPrefix("refused 410 seq \(start + 2) on is no longer held") == true, "\(gone.stdout.text)")
        #expect(await other.stdout.wait(containing: "refused")?.hasPrefix("refused 410 the stream is \(stream) now") == true, "\(other.stdout.text)")
    }

    /// Another host's apps: `listen` on every address only with TLS and a token. An app of
    /// `websockets` over wss:// with the token gets the feed and may send; without the token it
    /// is refused (401); plain ws:// to the TLS port never upgrades.
    @Test func aNetworkAddressServesWSSWithTheTokenOnly() async throws {
        let dir = try TemporaryDirectory()
        let certificates = try TestCertificates(in: dir)
        let token = try dir.write("face.token", "s3cret-face-token\n")
        DaemonUser.handOver(token)
        let port = try freePort()
        let fixture = try await DaemonFixture(
            extraConfig: """
                [local.websocket]
                listen = "0.0.0.0:\(port)"
                tls_cert_file = "\(certificates.serverCert)"
                tls_key_file = "\(certificates.serverKey)"
                token_file = "\(token)"
                """,
            directory: dir)
        let url = "wss://127.0.0.1:\(port)/"
        let app = try ManagedProcess(
            Paths.python, ["-u", "\(Paths.root)/Tests/peers/ws_app.py", url, "--cafile", certificates.caCert, "--token", "s3cret-face-token"], name: "wss")
        let stranger = try ManagedProcess(Paths.python, ["-u", "\(Paths.root)/Tests/peers/ws_app.py", url, "--cafile", certificates.caCert], name: "no-token")
        let plain = try ManagedProcess(Paths.python, ["-u", "\(Paths.root)/Tests/peers/ws_app.py", "ws://127.0.0.1:\(port)/"], name: "plain")
        defer { for p in [app, stranger, plain] { p.stop() } }
        #expect(await app.stdout.wait(containing: "open") != nil, "\(app.stdout.text) \(app.stderr.text) \(fixture.daemon.stderr.text.suffix(1500))")
        fixture.server.command("burst 50 64")
        _ = await app.stdout.wait(count: 50) { $0.hasPrefix("message ") }
        #expect(Self.problem(Self.numbers(app), 50) == nil)
        app.send("send from-wss")
        #expect(await fixture.server.event("message from-wss") != nil)
        #expect(await stranger.stdout.wait(containing: "refused")?.hasPrefix("refused 401 a token is needed") == true, "\(stranger.stdout.text)")
        // Plain HTTP to the TLS port: the handshake fails, the app never opens.
        _ = await plain.waitForExit()
        #expect(!plain.stdout.lines.contains("open"), "\(plain.stdout.text)")
    }

    /// A real browser: Debian's headless Chromium (Selenium, chromium-driver) loads a page that
    /// opens `new WebSocket("ws://127.0.0.1:PORT/")` and shows the feed; the same page from an
    /// origin not in `allowed_origins` is refused (the browser sees 1006, the handshake's 403).
    @Test func aBrowsersPageShowsTheFeedAndAPageFromAnotherOriginIsRefused() async throws {
        let page = try ManagedProcess(Paths.appsPython, ["-u", "\(Paths.root)/Tests/peers/browser_app.py", "50"], name: "browser")
        defer { page.stop() }
        guard let origins = await page.stdout.wait(containing: "origins "), case let parts = origins.split(separator: " "), parts.count == 3 else {
            throw TestFailure("the browser's pages did not start: \(page.stderr.text)")
        }
        let face = try await Face("allowed_origins = [\"\(parts[1])\"]")
        face.fixture.server.command("ticker 200 64")
        page.send(face.url)
        let feed = await page.stdout.wait(timeout: .seconds(90)) { $0.hasPrefix("feed ") || $0.hasPrefix("error ") }
        #expect(feed.flatMap { Int($0.dropFirst(5)) }.map { $0 >= 50 } == true, "\(page.stdout.text) \(page.stderr.text.suffix(2000))")
        let first = await page.stdout.wait { $0.hasPrefix("first ") }
        #expect(first.flatMap { try? JSONValue.parse(String($0.dropFirst(6))) }?["tick"] != nil, "\(String(describing: first))")
        #expect(await page.stdout.wait(timeout: .seconds(60)) { $0.hasPrefix("refused ") } == "refused 1006", "\(page.stdout.text)")
    }

    @Test func aTokenFileMakesTheTokenTheKeyAndLetsItsHolderSend() async throws {
        let dir = try TemporaryDirectory()
        let token = try dir.write("face.token", "s3cret-\(UInt32.random(in: 0...UInt32.max))\n")
        DaemonUser.handOver(token)
        let face = try await Face("token_file = \"\(token)\"")
        let without = try face.app(name: "without")
        let wrong = try face.app(["--token", "guess"], name: "wrong")
        defer { for app in [without, wrong] { app.stop() } }
        for app in [without, wrong] {
            let refused = await app.stdout.wait(containing: "refused")
            #expect(refused?.hasPrefix("refused 401 a token is needed (local.websocket.token_file)") == true, "\(app.stdout.text)")
        }
        let secret = try String(contentsOfFile: token, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        // As nobody, whom [access] does not let send: the token does.
        let holder = try face.app(["--token", secret], as: getuid() == 0 ? "nobody" : nil, name: "holder")
        defer { holder.stop() }
        #expect(await holder.stdout.wait(containing: "open") != nil, "\(holder.stdout.text) \(holder.stderr.text)")
        holder.send("send with-the-token")
        #expect(await face.fixture.server.event("message with-the-token") != nil)
    }

    @Test(.enabled(if: getuid() == 0, "needs root to run an app as another user"))
    func aTCPAppWhoseUserMayNotSendReadsAndIsClosedWithWhyWhenItSends() async throws {
        let face = try await Face()
        let nobody = try face.app(as: "nobody", name: "nobody")
        defer { nobody.stop() }
        #expect(await nobody.stdout.wait(containing: "open") != nil, "\(nobody.stdout.text) \(nobody.stderr.text)")
        face.fixture.server.command("send for everyone")
        #expect(await nobody.stdout.wait(containing: "message for everyone") != nil)
        nobody.send("send sneaky")
        let closed = await nobody.stdout.wait(containing: "closed")
        #expect(closed == "closed 1008 uid 65534 may not send upstream: add it to access.write_uids or write_groups", "\(nobody.stdout.text)")
        #expect(await face.fixture.server.event("message sneaky", timeout: .milliseconds(500)) == nil)
    }

    @Test(.enabled(if: getuid() == 0, "needs root to run an app as another user"))
    func accessWriteUIDsLetsALoopbackUserSend() async throws {
        let face = try await Face(after: "[access]\nwrite_uids = [65534]")
        let nobody = try face.app(as: "nobody", name: "nobody")
        defer { nobody.stop() }
        #expect(await nobody.stdout.wait(containing: "open") != nil, "\(nobody.stdout.text) \(nobody.stderr.text)")
        nobody.send("send granted")
        #expect(await face.fixture.server.event("message granted") != nil)
    }

    /// One that reads no more is closed at the bounds (the daemon keeps no more of it than
    /// they say), with 1008 and why, once it reads again; what it got before is whole and in
    /// order (never thinned); the other app gets everything.
    @Test func anAppThatStopsReadingIsClosedWithWhyAndTheOthersMissNothing() async throws {
        // Its close frame waits behind what it did not read until it reads again (below, once
        // the other app has all): close_timeout leaves that time. The feed is paced (1,000 a
        // second) and the bound is 4 MiB: the stopped app passes it after about 4 s (its kernel
        // holds little: small buffers both ways), the other would have to stall that long.
        let face = try await Face(
            "close_timeout = \"300s\"", local: "subscriber_queue = 100000\nsubscriber_queue_bytes = 4194304\nsend_buffer_bytes = 4096")
        let slow = try face.app(["--rcvbuf", "4096"], name: "slow")
        let fast = try face.app(name: "fast")
        defer { for app in [slow, fast] { app.stop() } }
        for app in [slow, fast] { #expect(await app.stdout.wait(containing: "open") != nil) }
        slow.send("stop")
        #expect(await slow.stdout.wait(containing: "stopped") != nil)
        let count = 10000
        face.fixture.server.command("ticker 1000 1000 \(count)")
        _ = await fast.stdout.wait(count: count, timeout: .seconds(120)) { $0.hasPrefix("message ") }
        let problem = Self.problem(Self.numbers(fast), count)
        #expect(problem == nil, "\(problem ?? ""): \(fast.stdout.lines.suffix(2))")
        slow.send("resume")
        let closed = await slow.stdout.wait(timeout: .seconds(60), containing: "closed")
        #expect(closed?.hasPrefix("closed 1008 too slow: ") == true, "\(slow.stdout.lines.suffix(2))")
        let got = Self.numbers(slow)
        #expect(!got.isEmpty && got.count < count && Self.problem(got) == nil, "\(Self.problem(got) ?? "\(got.count) messages")")
    }
}
