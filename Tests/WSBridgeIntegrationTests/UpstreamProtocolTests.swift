import Foundation
import Glibc
import Testing
import WSBridgeCore
import WSBridgeDaemon
import WSBridgeProtocol

/// RFC 6455 / 7692 details against real servers: nothing lost or sent out of turn on the wire.
@Suite struct UpstreamProtocolTests {
    @Test(arguments: [true, false])
    func emptyMessagesPassWithAndWithoutCompression(_ compression: Bool) async throws {
        let server = try await UpstreamServer(.python)
        var configuration = try LinkHarness.configuration(url: server.url)
        configuration.upstream.compression = compression
        let link = try await LinkHarness(configuration)
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        let open = await link.state(.open)
        #expect(open?.contains("permessage-deflate") == compression, "\(open ?? "not open")")
        for text in ["before", "", "after", "", "", "last"] {
            #expect(try await link.send(text))
        }
        let lines = await server.process.stdout.wait(count: 6) { $0.hasPrefix("message ") }
        #expect(lines == ["message before", "message ", "message after", "message ", "message ", "message last"])
        #expect(!link.events.text.contains("backingOff"), "\(link.events.text)")
    }

    @Test func aServerMessageFollowedByACloseLosesNothing() async throws {
        // Python websockets: a message, then the server's close at once. The subscriber gets the
        // message; a send made in answer arrives exactly once (before the close, or on the next
        // connection), never after our close frame.
        let f = try await DaemonFixture(serverKind: .python)
        let c = try await f.client()
        f.server.command("send question")
        f.server.command("close 4000 bye")
        #expect(await c.lines.wait(containing: "\"data\":\"question\"") != nil)
        c.send(#"{"id":"a","op":"send","text":"answer"}"#)
        let status = await c.reply("a")?.value(at: "result.status")?.stringValue
        #expect(status == "sent" || status == "queued")
        #expect(await f.server.event("message answer", timeout: .seconds(30)) != nil)
        #expect(await c.lines.wait(containing: "\"state\":\"open\"") != nil)
        // Settle: one more round trip through the new connection, then count.
        c.send(#"{"id":"b","op":"send","text":"marker"}"#)
        #expect(await f.server.event("message marker", timeout: .seconds(30)) != nil)
        #expect(f.server.process.stdout.lines.filter { $0 == "message answer" }.count == 1)
    }

    @Test func nothingIsSentAfterOurCloseFrame() async throws {
        // The server closes, then (misbehaving) keeps TCP open: a send in that window must wait
        // for the next connection instead of following our close frame.
        let f = try await DaemonFixture()
        let c = try await f.client()
        f.server.command("linger on")
        // No new link until the send is answered (a loaded machine let the 50 ms backoff and a
        // reconnect pass before the send, which then went out at once).
        f.server.command("refuse on")
        f.server.command("close 4000 bye")
        #expect(await f.server.event("closed 4000") != nil)
        c.send(#"{"id":"s","op":"send","text":"after close"}"#)
        let reply = await c.reply("s")
        #expect(reply?.value(at: "result.status") == "queued", "\(reply?.serialized ?? "no reply")")
        f.server.command("refuse off")
        #expect(await f.server.event("message after close", timeout: .seconds(30)) != nil)
        let lines = f.server.process.stdout.lines
        let sentAt = lines.firstIndex(of: "message after close")!
        let reconnectedAt = lines.lastIndex { $0.hasPrefix("connected ") }!
        #expect(reconnectedAt < sentAt, "\(lines)")
        #expect(lines.filter { $0.hasPrefix("connected ") }.count == 2)
    }

    @Test(arguments: [1005, 1006, 999, 2000, 1016] as [UInt16])
    func anInvalidCloseCodeFromTheServerIsAnswered1002(_ code: UInt16) async throws {
        let server = try await UpstreamServer(.nio)
        let link = try await LinkHarness(try LinkHarness.configuration(url: server.url))
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        #expect(await link.state(.open) != nil)
        let mark = link.mark
        server.command("close \(code) odd")
        // Our test server logs the close frame it gets back: 1002, never the bad code.
        #expect(await server.event("closed 1002") != nil, "\(server.process.stdout.text)")
        let down = await link.state(.backingOff, from: mark)
        #expect(down?.contains("close code \(code)") == true, "\(down ?? "no state")")
    }

    @Test func aServerThatNeverAnswersTheUpgradeTimesOut() async throws {
        // A listening socket that never accepts: TCP connects (the kernel's backlog), the
        // upgrade request goes out, and no 101 ever comes.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        #expect(bound == 0)
        #expect(listen(fd, 8) == 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        let port = Int(UInt16(bigEndian: addr.sin_port))
        var configuration = try LinkHarness.configuration(url: "ws://127.0.0.1:\(port)/")
        configuration.upstream.connectTimeout = .milliseconds(500)
        let link = try await LinkHarness(configuration)
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        let failed = await link.state(.backingOff)
        #expect(failed?.contains("timed out after 500ms") == true, "\(failed ?? "no state")")
        #expect(failed?.contains("upstream.connect_timeout") == true)
        #expect(!link.events.text.contains("state open"))
    }

    @Test(arguments: UpstreamServer.Kind.allCases)
    func aSlowUpstreamFillsTheBoundedQueueNotMemory(_ kind: UpstreamServer.Kind) async throws {
        // No heartbeat while the server stalls: a stalled peer answers no ping, and on a loaded
        // machine the sends below can outlast interval + deadline (30 s by default), which
        // rightly ends the link and loses what sat in its socket buffers (seen in CI).
        let f = try await DaemonFixture(
            extraConfig: "[queue]\nmax_messages = 20\nmax_bytes = 100000000\n[heartbeat]\ninterval = \"1h\"", serverKind: kind)
        let c = try await f.client()
        c.send(#"{"id":"u","op":"unsubscribe"}"#)
        _ = await c.reply("u")
        // The server stalls the connections it has: wait until it has the daemon's (the daemon
        // can see the link open before the server's handler has registered it).
        #expect(await f.server.event("connected 1") != nil)
        f.server.command("stall on")
        #expect(await f.server.event("stall on") != nil)
        // 64 KiB messages: TCP buffers and NIO's write buffer take some, then the queue fills.
        // Letters that do not compress much (Python websockets negotiates permessage-deflate):
        // about 40 KB each on the wire. Loopback autotunes the stalled peer's receive buffer up
        // to tcp_rmem's maximum (32 MiB here) plus the send buffer (4 MiB): up to some 900
        // messages before the link stops taking them, so the bound is well above that.
        let payload = String((0..<65536).map { _ in "abcdefghijklmnopqrstuvwxyz".randomElement()! })
        var statuses: [String] = []
        for i in 0..<3000 {
            c.send(#"{"id":"m\#(i)","op":"send","text":"\#(i) \#(payload)"}"#)
            let reply = await c.reply("m\(i)")
            statuses.append(reply?.value(at: "result.status")?.stringValue ?? reply?.value(at: "error.code")?.stringValue ?? "none")
            if statuses.last == "queue_full" { break }
        }
        #expect(statuses.last == "queue_full", "\(statuses)")
        // The last 20 before queue_full filled the queue (queue.max_messages); more than 20 in
        // all when the link took some of the queue between two sends (a slow, sanitized build).
        let queued = statuses.filter { $0 == "queued" }.count
        #expect(queued >= 20 && statuses.suffix(21).dropLast().allSatisfy { $0 == "queued" }, "\(statuses)")
        // What went out before the queue took over sits in the kernel's socket buffers (loopback
        // autotunes them to several MiB), not in the daemon: without the writability check all
        // 3000 would be "sent" into NIO's unbounded buffer.
        let sent = statuses.filter { $0 == "sent" }.count
        // The upstream reads again: every accepted message arrives, in order.
        f.server.command("stall off")
        let accepted = sent + queued
        let lines = await f.server.process.stdout.wait(count: accepted, timeout: .seconds(60)) { $0.hasPrefix("message ") }
        #expect(lines.map { $0.split(separator: " ")[1] } == (0..<accepted).map { Substring(String($0)) })
    }
    /// A hostile server: a valid 101 with an extension parameter never offered, and a frame in
    /// the same write. The upgrade is refused, the daemon lives, says why and tries again. (Fed
    /// in one read to the connector's pipeline, such a reply crashed it once; the fuzz seed
    /// `crash-101-bad-extension-then-frame` holds that case, docs/fuzzing.md.)
    @Test func a101WithABadExtensionAndAFrameBehindItIsRefusedNotFatal() async throws {
        try await Self.refusedNotFatal(case: "bad-extension", error: "server_no_ceontxt_takeover")
    }
    /// An HTTP/1.0 101 (RFC 6455 4.1 asks for HTTP/1.1): NIO's upgrader reads only the code, so
    /// the daemon took it until the handshake fuzz target found it (seed `crash-101-http-1.0`).
    @Test func anHTTP10SwitchingProtocolsIsRefused() async throws {
        try await Self.refusedNotFatal(case: "http-1.0", error: "HTTP/1.0 101, not HTTP/1.1 101")
    }

    static func refusedNotFatal(case flaw: String, error: String) async throws {
        let dir = try TemporaryDirectory()
        let server = try ManagedProcess(Paths.python, ["-u", "\(Paths.root)/Tests/peers/raw_upgrade.py", flaw], name: "raw-upgrade")
        defer { server.stop() }
        guard let line = await server.stdout.wait(containing: "listening "), let port = Int(line.dropFirst("listening ".count)) else {
            Issue.record("raw_upgrade.py did not start: \(server.stderr.text)")
            return
        }
        let socket = dir.file("d.sock")
        let config = try writeDaemonConfig(dir, "wsbridged", url: "ws://127.0.0.1:\(port)/", socket: socket)
        let daemon = try ManagedProcess.daemon(["--config", config], name: "wsbridged")
        defer { daemon.stop() }
        // Two upgrades: the daemon outlived the first and came back.
        #expect(await server.stdout.wait(containing: "upgrade 2") != nil, "\(daemon.stderr.text)")
        let client = try SocketClient(path: socket)
        client.send(#"{"id":"s","op":"status"}"#)
        let status = await client.reply("s")
        #expect(status?.value(at: "result.state")?.stringValue != "open")
        #expect(status?.value(at: "result.last_error")?.stringValue?.contains(error) == true, "\(status.map { "\($0)" } ?? "none")")
        #expect(daemon.isRunning)
    }
}
