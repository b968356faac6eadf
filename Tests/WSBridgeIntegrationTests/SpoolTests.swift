import Foundation
import Testing
import WSBridgeProtocol

/// The durable outbound spool with real daemons: sends queued while the upstream is down
/// survive `kill -9` (and a graceful restart), a kill in the middle of a stream of writes, a
/// torn tail and a damaged record; a `queued` reply comes only after the spool write (and its
/// fdatasync, under "always"), checked with strace.
@Suite struct SpoolTests {
    /// Writes the config of a daemon named `name` (its socket and config file) whose spool is
    /// `dir/spool`. Without `url` the link stays idle (`connect_on_start = false`): every send
    /// is queued, as while the upstream is down. `local` goes into [local], `extra` into [queue].
    static func config(
        _ dir: TemporaryDirectory, _ name: String, url: String? = nil, fsync: String = "always", local: String = "", extra: String = "",
        spool: String? = nil
    ) throws -> (config: String, socket: String) {
        let socket = dir.file("\(name).sock")
        let config = try writeDaemonConfig(
            dir, name, url: url ?? "ws://127.0.0.1:9/", socket: socket, upstream: url == nil ? "connect_on_start = false" : "",
            extra: "\(local)\n[queue]\nspool = \"\(spool ?? dir.file("spool"))\"\nfsync = \"\(fsync)\"\n\(extra)"
        )
        return (config, socket)
    }

    /// Starts that daemon (under `wrapper`, if any); returns once it listens.
    static func daemon(
        _ dir: TemporaryDirectory, _ name: String, url: String? = nil, fsync: String = "always", local: String = "", extra: String = "",
        wrapper: [String] = [], spool: String? = nil
    ) async throws -> (ManagedProcess, socket: String) {
        let (config, socket) = try Self.config(dir, name, url: url, fsync: fsync, local: local, extra: extra, spool: spool)
        let command = wrapper + daemonCommand(["--config", config, "--log-level", "debug"])
        let daemon = try ManagedProcess.daemon(command: command, name: name)
        guard await daemon.awaitReady() else {
            throw TestFailure("\(name) did not start: \(daemon.stderr.text)")
        }
        return (daemon, socket)
    }

    static func client(_ socket: String) async throws -> SocketClient {
        try await SocketClient.connected(to: socket)
    }

    /// Sends `texts` pipelined and returns the replies, in the order they came.
    static func send(_ texts: [String], over client: SocketClient) async -> [JSONValue] {
        let from = client.lines.count
        for (i, text) in texts.enumerated() {
            client.send(#"{"id":"s\#(i)","op":"send","text":"\#(text)"}"#)
        }
        let lines = await client.lines.wait(count: texts.count, from: from) { $0.contains("\"type\":\"reply\"") }
        return lines.compactMap { try? JSONValue.parse($0) }
    }

    static func kill9(_ daemon: ManagedProcess) async {
        daemon.signal(SIGKILL)
        _ = await daemon.waitForExit()
    }

    static func spoolSize(_ spool: String) -> Int {
        (try? FileManager.default.attributesOfItem(atPath: spool + "/outbound.log")[.size] as? Int) ?? -1
    }

    /// Waits until the daemon at `socket` reports its spool file back to its 16-byte header
    /// (every spooled message went upstream), then checks the file itself.
    static func waitForEmptySpool(_ socket: String, _ spool: String) async -> Bool {
        (try? await awaitStatus(socket, "the spool cut back to its header") { $0.queue.spool?.fileBytes == 16 }) != nil && Self.spoolSize(spool) == 16
    }

    /// Starts an upstream and a daemon on the spool, waits for `count` messages, then proves
    /// nothing more came: a sentinel sent now must be the next message. Returns the texts.
    static func deliver(
        _ dir: TemporaryDirectory, count: Int, fsync: String = "always", spool: String? = nil
    ) async throws -> (texts: [String], log: String) {
        let spool = spool ?? dir.file("spool")
        let server = try await UpstreamServer(.nio, arguments: ["--no-echo"])
        let (daemon, socket) = try await Self.daemon(dir, "after", url: server.url, fsync: fsync, spool: spool)
        defer { daemon.stop() }
        let got = await server.process.stdout.wait(count: count) { $0.hasPrefix("message ") }
        #expect(got.count == count, "upstream port \(server.port): \(server.process.stdout.text)\n\(server.process.stderr.text)\n\(daemon.stderr.text)")
        #expect(await Self.waitForEmptySpool(socket, spool), "spool size \(Self.spoolSize(spool))")
        let client = try await Self.client(socket)
        let reply = await Self.send(["sentinel"], over: client)
        #expect(reply.first?["result"]?["status"] == "sent")
        _ = await server.event("message sentinel")
        let all = server.process.stdout.lines.filter { $0.hasPrefix("message ") }.map { String($0.dropFirst("message ".count)) }
        #expect(all.last == "sentinel")
        return (Array(all.dropLast()), daemon.stderr.text)
    }

    @Test(arguments: ["always", "batch"])
    func twoHundredQueuedSendsSurviveKill9AndArriveOnceInOrder(fsync: String) async throws {
        let dir = try TemporaryDirectory()
        let (first, socket) = try await Self.daemon(dir, "before", fsync: fsync)
        let client = try await Self.client(socket)
        let texts = (1...200).map { "m\($0)" }
        let replies = await Self.send(texts, over: client)
        #expect(replies.count == 200)
        #expect(replies.allSatisfy { $0["result"]?["status"] == "queued" })
        #expect(replies.map { $0["result"]?["queued"]?.intValue } == (1...200).map { Optional($0) })
        await Self.kill9(first)

        let (delivered, log) = try await Self.deliver(dir, count: 200, fsync: fsync)
        #expect(delivered == texts)
        #expect(log.contains("spool: 200 queued message(s)"))
    }

    @Test func aKillInTheMiddleOfAStreamOfWritesLosesNothingAnswered() async throws {
        let dir = try TemporaryDirectory()
        // The client reads no replies until the kill, so the daemon cannot answer all 20,000:
        // past 64 KiB of unread replies (local.client_output_bytes, beyond a socket buffer of 8 KiB)
        // it stops reading requests.
        // The kill therefore comes mid-stream, whatever the timing.
        let (first, socket) = try await Self.daemon(
            dir, "before", fsync: "always", local: "client_output_bytes = 65536\nsend_buffer_bytes = 4096", extra: "max_messages = 100000")
        let client = try SocketClient(path: socket, reading: false)
        let control = try await Self.client(socket)
        let total = 20_000
        // Written from a thread of its own: it blocks once the daemon stops reading.
        let writer = Task {
            await onThread {
                for i in 1...total { client.send(#"{"id":"s\#(i)","op":"send","text":"k\#(i)"}"#) }
            }
        }
        // Killed once some hundreds are queued (asked over another connection, one status
        // answered after another).
        var queued = 0
        for i in 0..<100_000 where queued < 300 {
            control.send(#"{"id":"q\#(i)","op":"status"}"#)
            queued = await control.reply("q\(i)")?.value(at: "result.queue.messages")?.intValue ?? 0
        }
        #expect(queued >= 300)
        await Self.kill9(first)
        await writer.value
        // The replies that reached the client before the kill, read now up to the end.
        client.startReading()
        _ = await client.lines.wait(timeout: .seconds(20)) { _ in false }
        let answered = client.lines.lines.filter { $0.contains("\"status\":\"queued\"") }.count
        #expect(answered > 0)
        #expect(answered < total)

        // What arrives is k1, k2, ... with no gap and no repeat, and covers every answered send.
        let server = try await UpstreamServer(.nio, arguments: ["--no-echo"])
        let (second, socket2) = try await Self.daemon(dir, "after", url: server.url)
        defer { second.stop() }
        #expect(await Self.waitForEmptySpool(socket2, dir.file("spool")))
        let probe = try await Self.client(socket2)
        _ = await Self.send(["sentinel"], over: probe)
        _ = await server.event("message sentinel", timeout: .seconds(60))
        let all = server.process.stdout.lines.filter { $0.hasPrefix("message ") }.map { String($0.dropFirst("message ".count)) }
        let delivered = Array(all.dropLast())
        #expect(delivered == (0..<delivered.count).map { "k\($0 + 1)" })
        #expect(delivered.count >= answered)
    }

    /// Fills a spool with m1...m200 through a daemon killed with -9, and returns the file.
    static func spoolOf200(_ dir: TemporaryDirectory) async throws -> Data {
        let (first, socket) = try await Self.daemon(dir, "before")
        let client = try await Self.client(socket)
        let replies = await Self.send((1...200).map { "m\($0)" }, over: client)
        #expect(replies.count == 200)
        await Self.kill9(first)
        return try Data(contentsOf: URL(fileURLWithPath: dir.file("spool/outbound.log")))
    }

    @Test func aTornTailIsCutAndLoggedAndTheRestArrives() async throws {
        let dir = try TemporaryDirectory()
        let file = try await Self.spoolOf200(dir)
        // A write cut short: the last record loses its last 3 bytes.
        try file.dropLast(3).write(to: URL(fileURLWithPath: dir.file("spool/outbound.log")))
        let (delivered, log) = try await Self.deliver(dir, count: 199)
        #expect(delivered == (1...199).map { "m\($0)" })
        #expect(log.contains("truncated at offset \(file.count - (17 + 4)), dropping 18 byte(s)"), "\(log)")
    }

    @Test func aDamagedRecordIsSkippedAndLoggedAndTheRestArrives() async throws {
        let dir = try TemporaryDirectory()
        var file = try await Self.spoolOf200(dir)
        // Records m1...m9 are 19 bytes, m10...m99 20, m100 21: flip a bit in m100's payload.
        let m100 = 16 + 9 * 19 + 90 * 20
        file[m100 + 17] ^= 0x01
        try file.write(to: URL(fileURLWithPath: dir.file("spool/outbound.log")))
        let (delivered, log) = try await Self.deliver(dir, count: 199)
        #expect(delivered == (1...200).filter { $0 != 100 }.map { "m\($0)" })
        #expect(log.contains("skipped a damaged record at offset \(m100)"), "\(log)")
    }

    @Test func aGracefulRestartKeepsTheQueueWithinItsBounds() async throws {
        let dir = try TemporaryDirectory()
        let (first, socket) = try await Self.daemon(dir, "before", extra: "max_messages = 3")
        let client = try await Self.client(socket)
        let replies = await Self.send(["a", "b", "c", "d"], over: client)
        #expect(replies.prefix(3).allSatisfy { $0["result"]?["status"] == "queued" })
        #expect(replies.last?["error"]?["code"] == "queue_full")
        // The spool holds the three (read by an independent reader).
        #expect(try Self.spoolRecords(dir).map(\.payload) == ["a", "b", "c"])
        first.signal(SIGTERM)
        #expect(await first.waitForExit() == 0)
        let (delivered, _) = try await Self.deliver(dir, count: 3)
        #expect(delivered == ["a", "b", "c"])
    }

    @Test func aSecondDaemonOnTheSameSpoolIsToldAndExits() async throws {
        let dir = try TemporaryDirectory()
        let (first, _) = try await Self.daemon(dir, "before")
        defer { first.stop() }
        let (config, _) = try Self.config(dir, "second")
        let second = try ManagedProcess.daemon(["--config", config], name: "second")
        #expect(await second.waitForExit() == 73)
        #expect(second.stderr.text.contains("is in use by another wsbridged: give each instance its own queue.spool"))
    }

    /// Replies stay in request order: a `status` pipelined behind a spooled `send` waits for it
    /// (answered at once, it would overtake the send's reply, which needs the writer thread).
    @Test func repliesStayInRequestOrderBehindASpooledSend() async throws {
        let dir = try TemporaryDirectory()
        let (daemon, socket) = try await Self.daemon(dir, "ordered")
        defer { daemon.stop() }
        let client = try await Self.client(socket)
        var batch = ""
        for i in 0..<50 {
            batch += #"{"id":"send\#(i)","op":"send","text":"o\#(i)"}"# + "\n" + #"{"id":"status\#(i)","op":"status"}"# + "\n"
        }
        client.sendRaw(Array(batch.utf8))
        let replies = await client.lines.wait(count: 100) { $0.contains("\"type\":\"reply\"") }
        let ids = replies.compactMap { (try? JSONValue.parse($0))?["id"]?.stringValue }
        #expect(ids == (0..<50).flatMap { ["send\($0)", "status\($0)"] })
        // Each status already counts the send before it.
        let depths = replies.compactMap { (try? JSONValue.parse($0))?["result"]?["queue"]?["messages"]?.intValue }
        #expect(depths == Array(1...50))
    }

    /// A full disk: the send that does not fit is refused with the reason, the file keeps
    /// exactly the sends answered `queued` (no partial record), and those are delivered.
    @Test(.enabled(if: geteuid() == 0, "needs root to mount a small tmpfs"))
    func aFullDiskRefusesTheSendAndKeepsWhatWasQueued() async throws {
        let dir = try TemporaryDirectory()
        let small = try dir.mountSmallTmpfs(size: "64k")
        let spool = small + "/spool"
        let (first, socket) = try await Self.daemon(dir, "before", extra: "max_messages = 1000", spool: spool)
        let client = try await Self.client(socket)
        let chunk = String(repeating: "z", count: 3000)
        var accepted: [String] = []
        var refusal: JSONValue?
        for i in 1...100 {
            let reply = await Self.send(["\(i)-\(chunk)"], over: client).first
            if reply?["result"]?["status"] == "queued" {
                accepted.append("\(i)-\(chunk)")
            } else {
                refusal = reply
                break
            }
        }
        #expect(accepted.count > 5 && accepted.count < 30, "\(accepted.count) sends fitted in 64 KiB")
        #expect(refusal?["error"]?["code"] == "queue_full")
        let message = refusal?["error"]?["message"]?.stringValue ?? ""
        #expect(message.contains("No space left on device") && message.contains("it was not queued"), "\(message)")
        // The file holds exactly the accepted sends: the refused batch was cut off again.
        #expect(try Self.spoolRecords(dir, spool: spool).map(\.payload) == accepted)
        await Self.kill9(first)
        let (delivered, _) = try await Self.deliver(dir, count: accepted.count, spool: spool)
        #expect(delivered == accepted)
    }

    struct Record: Decodable {
        var kind: String
        var id: UInt64
        var payload: String
    }

    /// The spool's records, as Tests/peers/spool_read.py (its own CRC-32C) reads them.
    static func spoolRecords(_ dir: TemporaryDirectory, spool: String? = nil) throws -> [Record] {
        struct File: Decodable { var records: [Record] }
        let file = (spool ?? dir.file("spool")) + "/outbound.log"
        let r = try spawnAndWait(Paths.python, ["\(Paths.root)/Tests/peers/spool_read.py", file])
        guard r.status == 0 else { throw TestFailure("spool_read.py: \(r.stderr)") }
        return try JSONDecoder().decode(File.self, from: Data(r.stdout.utf8)).records
    }

    /// Under strace: the reply `queued` is written only after the record's pwrite, and with
    /// "always" after its fdatasync too; with "batch" no fdatasync stands in between.
    @Test(arguments: ["always", "batch"])
    func queuedIsAnsweredOnlyOnceTheSpoolHasTheMessage(fsync: String) async throws {
        let dir = try TemporaryDirectory()
        let trace = dir.file("strace.log")
        let (daemon, socket) = try await Self.daemon(
            dir, "traced", fsync: fsync,
            wrapper: ["/usr/bin/strace", "-f", "-s", "4096", "-e", "trace=pwrite64,fdatasync,write,writev", "-o", trace]
        )
        let client = try await Self.client(socket)
        let replies = await Self.send(["probe-\(fsync)"], over: client)
        #expect(replies.first?["result"]?["status"] == "queued")
        // The record is in the file, as an independent reader sees it.
        #expect(try Self.spoolRecords(dir).map(\.payload) == ["probe-\(fsync)"])
        // strace's first line names the daemon's pid; strace itself would only detach on SIGTERM.
        let traced = try String(contentsOfFile: trace, encoding: .utf8)
        let pid = traced.split(separator: " ", maxSplits: 1).first.flatMap { Int32($0) }
        #expect(pid != nil, "strace's first line names no pid: \(traced.prefix(200))")
        if let pid { kill(pid, SIGTERM) }
        let status = await daemon.waitForExit()
        // Not stopped in time (strace killed instead): the daemon must not outlive the test.
        if status != 0, let pid { kill(pid, SIGKILL) }
        let lines = try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n").map(String.init)
        guard let written = lines.firstIndex(where: { $0.contains("pwrite64(") && $0.contains("probe-\(fsync)") }),
            let answered = lines.firstIndex(where: { ($0.contains("write(") || $0.contains("writev(")) && $0.contains("\\\"status\\\":\\\"queued\\\"") })
        else {
            Issue.record("no spool write or no reply in the trace:\n\(lines.suffix(40).joined(separator: "\n"))")
            return
        }
        #expect(written < answered)
        let synced = lines[written..<answered].contains { $0.contains("fdatasync") && $0.contains("= 0") }
        #expect(synced == (fsync == "always"), "\(lines[written...answered].joined(separator: "\n"))")
    }
}
