import Foundation
import Testing
import WSBridgeProtocol

/// The journal end to end (docs/journal.md): a consumer resumes across a graceful restart and a
/// `kill -9` of the daemon, and from further back than the replay ring keeps, at its own pace.
@Suite(.serialized) struct JournalTests {
    /// `local`: keys of [local]; `journal`: more keys of [journal].
    static func daemon(_ dir: TemporaryDirectory, url: String, local: String = "", journal: String = "") async throws -> (ManagedProcess, String) {
        let socket = dir.file("d.sock")
        let config = try writeDaemonConfig(
            dir, "wsbridged", url: url, socket: socket, extra: local + "\n[journal]\ndir = \"\(dir.file("journal"))\"\n" + journal)
        let daemon = try ManagedProcess.daemon(["--config", config], name: "wsbridged")
        guard await daemon.awaitLink(.open) else { throw TestFailure(daemon.stderr.text) }
        return (daemon, socket)
    }

    /// A consumer that resumes: no live lines before its subscribe (it unsubscribes first).
    static func resume(_ socket: String, since: Int, stream: String, name: String) async throws -> (SocketClient, hello: JSONValue, from: Int) {
        let client = try SocketClient(path: socket, name: name)
        guard let first = await client.lines.wait(containing: #""type":"hello""#) else { throw TestFailure("no hello") }
        client.send(#"{"id":"u","op":"unsubscribe"}"#)
        _ = await client.reply("u")
        client.send(#"{"id":"r","op":"subscribe","since":\#(since),"stream":"\#(stream)"}"#)
        guard await client.reply("r")?["ok"] == true else { throw TestFailure("subscribe refused: \(client.lines.lines)") }
        let from = client.lines.lines.firstIndex { $0.contains(#""id":"r""#) }! + 1
        return (client, try JSONValue.parse(first), from)
    }

    /// The message and gap lines from index `from` on, parsed.
    static func feed(_ client: SocketClient, from: Int) -> [JSONValue] {
        client.lines.lines[from...].compactMap { try? JSONValue.parse($0) }.filter { $0["type"] == "message" || $0["type"] == "gap" }
    }

    static func tick(_ message: JSONValue) -> Int? {
        guard let data = message["data"]?.stringValue, let json = try? JSONValue.parse(data) else { return nil }
        return json["tick"]?.intValue
    }

    static func seqs(_ lines: [JSONValue]) -> [Int] { lines.filter { $0["type"] == "message" }.compactMap { $0["seq"]?.intValue } }

    /// Waits until the client has a message with seq `seq` or later.
    static func waitForSeq(_ client: SocketClient, _ seq: Int, from: Int = 0, timeout: Duration = .seconds(30)) async -> Bool {
        await client.lines.wait(from: from, timeout: timeout) { line in
            guard line.contains(#""type":"message""#), let json = try? JSONValue.parse(line), let s = json["seq"]?.intValue else { return false }
            return s >= seq
        } != nil
    }

    @Test func aGracefulRestartAt1000PerSecondKeepsTheStreamAndLosesNothing() async throws {
        let dir = try TemporaryDirectory()
        let server = try await UpstreamServer(.nio)
        var (daemon, socket) = try await Self.daemon(dir, url: server.url)
        let before = try SocketClient(path: socket, name: "before")
        guard let helloLine = await before.lines.wait(containing: #""type":"hello""#), let stream = try JSONValue.parse(helloLine)["stream"]?.stringValue
        else { throw TestFailure("no hello") }
        server.command("ticker 1000 64")
        #expect(await Self.waitForSeq(before, 300))
        let seen = Self.seqs(Self.feed(before, from: 0))
        let since = try #require(seen.last)
        before.close()
        // The ticker goes on while the daemon stops and starts: SIGTERM at 1000 msg/s.
        daemon.signal(SIGTERM)
        #expect(await daemon.waitForExit() == 0)
        (daemon, socket) = try await Self.daemon(dir, url: server.url)
        defer { daemon.stop() }
        #expect(try daemonStatus(socket).journal?.opened == "continued")
        let (after, hello, from) = try await Self.resume(socket, since: since, stream: stream, name: "after")
        #expect(hello["stream"]?.stringValue == stream)
        let restartedAt = try #require(hello["seq"]?.intValue)
        #expect(restartedAt > since)
        // Everything after `since`: what the first run journaled, then the second run's.
        #expect(await Self.waitForSeq(after, restartedAt + 500, from: from))
        server.command("ticker off")
        // wsbridgectl tail --since --stream follows on from the first run's seq just the same.
        let tail = try ManagedProcess(
            "\(Paths.bin)/wsbridgectl", ["--socket", socket, "tail", "--json", "--since", "\(since)", "--stream", stream], name: "tail")
        defer { tail.stop() }
        let tailFirst = await tail.stdout.wait { $0.contains(#""type":"message""#) }.flatMap { try? JSONValue.parse($0) }
        #expect(tailFirst?["seq"]?.intValue == since + 1, "\(tail.stdout.text.prefix(300)) \(tail.stderr.text)")
        #expect(!tail.stdout.text.contains(#""type":"gap""#) && !tail.stderr.text.contains("restarted"))
        let lines = Self.feed(after, from: from)
        #expect(lines.filter { $0["type"] == "gap" }.isEmpty, "\(lines.filter { $0["type"] == "gap" })")
        let seqs = Self.seqs(lines)
        #expect(seqs == Array(since + 1...since + seqs.count), "\(seqs.prefix(5))...\(seqs.suffix(5))")
        // Each upstream message once: the ticks only rise (the ones sent while no daemon ran
        // never reached one).
        let ticks = lines.compactMap(Self.tick)
        #expect(ticks.count == seqs.count && zip(ticks, ticks.dropFirst()).allSatisfy { $0 < $1 })
    }

    @Test func aKillMidStreamLosesOnlyWhatNeverReachedTheDiskAndSaysSoOnce() async throws {
        let dir = try TemporaryDirectory()
        let server = try await UpstreamServer(.nio)
        var (daemon, socket) = try await Self.daemon(dir, url: server.url)
        // `live` reads everything the first run sends; `behind` stops early.
        let live = try SocketClient(path: socket, name: "live")
        let behind = try SocketClient(path: socket, name: "behind")
        guard let helloLine = await live.lines.wait(containing: #""type":"hello""#), let stream = try JSONValue.parse(helloLine)["stream"]?.stringValue
        else { throw TestFailure("no hello") }
        server.command("ticker 1000 64")
        #expect(await Self.waitForSeq(behind, 200))
        behind.close()
        let behindSeen = Self.seqs(Self.feed(behind, from: 0))
        let behindSince = try #require(behindSeen.last)
        #expect(await Self.waitForSeq(live, behindSince + 800))
        daemon.signal(SIGKILL)
        _ = await daemon.waitForExit()
        _ = await live.waitForHangUp()
        let liveLines = Self.feed(live, from: 0)
        let liveSince = try #require(Self.seqs(liveLines).last)
        (daemon, socket) = try await Self.daemon(dir, url: server.url)
        defer { daemon.stop() }
        let journal = try #require(try daemonStatus(socket).journal)
        #expect(journal.opened == "after_crash", "\(journal)")
        let table = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", socket, "journal"]).stdout
        #expect(table.contains("without a clean shutdown"), "\(table)")
        // The seq after the last one journaled: the new run starts there, in a new stream.
        let (resumed, hello, from) = try await Self.resume(socket, since: behindSince, stream: stream, name: "resumed")
        let newStream = try #require(hello["stream"]?.stringValue)
        #expect(newStream != stream)
        let firstNew = try #require(hello["seq"]?.intValue)
        #expect(await Self.waitForSeq(resumed, firstNew + 300, from: from))
        let lines = Self.feed(resumed, from: from)
        let gaps = lines.filter { $0["type"] == "gap" }
        #expect(gaps.count == 1 && gaps.first?["reason"] == "not_durable" && gaps.first?["stream"]?.stringValue == newStream, "\(gaps)")
        let gapIndex = try #require(lines.firstIndex { $0["type"] == "gap" })
        let journaled = Self.seqs(Array(lines[..<gapIndex]))
        let durableEnd = journaled.last ?? behindSince
        // Before the gap: the first run's messages after `since`, as the live reader got them.
        #expect(journaled == Array((behindSince + 1)...max(behindSince, durableEnd)).filter { $0 > behindSince })
        // As the live reader got them, where it got them: on a loaded machine the journal's
        // writer can be ahead of a reader's socket, and the kill takes what was on its way to it.
        let liveTicks = Dictionary(liveLines.compactMap { l in l["seq"]?.intValue.map { ($0, Self.tick(l)) } }, uniquingKeysWith: { a, _ in a })
        #expect(
            lines[..<gapIndex].allSatisfy { line in liveTicks[line["seq"]!.intValue!].map { $0 == Self.tick(line) } ?? (line["seq"]!.intValue! > liveSince) })
        // What the kill took: what the first run numbered after its last journaled message,
        // at most a second's worth (journal.fsync_interval) at 1000 msg/s; here only what the
        // writer had not yet written (a kill leaves the page cache).
        #expect(liveSince - durableEnd <= 1000, "live reader at \(liveSince), journal at \(durableEnd)")
        #expect(gaps.first?["next"]?.intValue == durableEnd + 1)
        // After it, the new run: seqs on from there, ticks only rising.
        let after = Self.seqs(Array(lines[(gapIndex + 1)...]))
        #expect(after.first == durableEnd + 1 && after == Array((durableEnd + 1)...(durableEnd + after.count)))
        let ticks = lines.compactMap(Self.tick)
        #expect(zip(ticks, ticks.dropFirst()).allSatisfy { $0 < $1 })
        // The live reader: ahead of the journal (as it mostly is), told at once, then the new
        // stream; behind it (its socket lagged the writer), the journal's rest first.
        let (ahead, _, aheadFrom) = try await Self.resume(socket, since: liveSince, stream: stream, name: "ahead")
        #expect(await Self.waitForSeq(ahead, firstNew + 10, from: aheadFrom))
        let aheadLines = Self.feed(ahead, from: aheadFrom)
        if liveSince >= durableEnd {
            #expect(aheadLines.first?["type"] == "gap" && aheadLines.first?["reason"] == "not_durable" && aheadLines.first?["since"]?.intValue == liveSince)
            #expect(Self.seqs(aheadLines).first == durableEnd + 1)
        } else {
            #expect(Self.seqs(aheadLines).first == liveSince + 1, "\(aheadLines.prefix(3))")
        }
        server.command("ticker off")
    }

    @Test func anOlderSinceGetsExpiredThenTheOldestKeptAtItsOwnPace() async throws {
        let dir = try TemporaryDirectory()
        let server = try await UpstreamServer(.nio)
        // 64 KiB segments, 1 MiB kept; a queue of 64 messages for the replaying consumer.
        let local = "subscriber_queue = 64\nreplay = 100"
        let journal = "segment_bytes = 65536\nmax_bytes = 1048576"
        var (daemon, socket) = try await Self.daemon(dir, url: server.url, local: local, journal: journal)
        let watcher = try SocketClient(path: socket, name: "watcher")
        guard let helloLine = await watcher.lines.wait(containing: #""type":"hello""#), let stream = try JSONValue.parse(helloLine)["stream"]?.stringValue
        else { throw TestFailure("no hello") }
        // About 3 MiB in 1 KiB messages.
        server.command("burst 3000 1000")
        #expect(await Self.waitForSeq(watcher, 3000))
        let (late, _, from) = try await Self.resume(socket, since: 1, stream: stream, name: "late")
        #expect(await Self.waitForSeq(late, 3000, from: from))
        let lines = Self.feed(late, from: from)
        guard lines.count > 1, lines[0]["type"] == "gap", let oldest = lines[0]["next"]?.intValue else { throw TestFailure("\(lines.prefix(2))") }
        #expect(lines[0]["reason"] == "expired" && lines[0]["from"] == 2 && lines[0]["to"]?.intValue == oldest - 1, "\(lines[0])")
        #expect(oldest > 2 && oldest < 3000, "\(lines[0])")
        #expect(lines[1]["seq"]?.intValue == oldest)
        // Every kept message once, in order (retention, still at work while the replay began,
        // may say `expired` again further on), and none dropped although the replay is 50 times
        // the consumer's queue: it reads at its own pace.
        var expected = Set(oldest...3000)
        for gap in lines.dropFirst() where gap["type"] == "gap" {
            #expect(gap["reason"] == "expired", "\(gap)")
            if let a = gap["from"]?.intValue, let b = gap["to"]?.intValue { expected.subtract(a...b) }
        }
        #expect(Self.seqs(lines) == expected.sorted())
        #expect(!late.lines.lines.contains { $0.contains(#""type":"dropped""#) })
        // A restart (everything written and the writer idle): what the operator sees.
        daemon.signal(SIGTERM)
        #expect(await daemon.waitForExit() == 0)
        (daemon, socket) = try await Self.daemon(dir, url: server.url, local: local, journal: journal)
        defer { daemon.stop() }
        let json = try JSONValue.parse(try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", socket, "journal", "--json"]).stdout)
        let kept = try #require(json["oldest_seq"]?.intValue)
        #expect(json["newest_seq"] == 3000 && kept >= oldest, "\(json)")
        #expect((json["bytes"]?.intValue ?? 0) <= (1 << 20) + 65536 && (json["segments"]?.intValue ?? 0) > 1, "\(json)")
        let table = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", socket, "journal"]).stdout
        #expect(table.contains("oldest         seq \(kept),") && table.contains("newest         seq 3000,"), "\(table)")
        #expect(table.contains("state          writing (fsync batch)") && table.contains("replaying      0 consumers"), "\(table)")
        #expect(table.contains("stream         \(stream)"), "\(table)")
        let metrics = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", socket, "metrics"]).stdout
        #expect(metrics.contains("wsbridge_journal_newest_seq 3000") && metrics.contains("wsbridge_journal_stopped 0"), "\(metrics)")
    }

    @Test(.enabled(if: geteuid() == 0, "needs root to mount a small tmpfs"))
    func aFullDiskStopsTheJournalAndLiveDeliveryGoesOn() async throws {
        let dir = try TemporaryDirectory()
        let small = try dir.mountSmallTmpfs(size: "256k")
        let server = try await UpstreamServer(.nio)
        let socket = dir.file("d.sock")
        let config = try writeDaemonConfig(dir, "wsbridged", url: server.url, socket: socket, extra: "replay = 100\n[journal]\ndir = \"\(small)/journal\"\n")
        let daemon = try ManagedProcess.daemon(["--config", config], name: "wsbridged")
        defer { daemon.stop() }
        guard await daemon.awaitLink(.open) else { throw TestFailure(daemon.stderr.text) }
        let watcher = try SocketClient(path: socket, name: "watcher")
        _ = await watcher.lines.wait(containing: #""type":"hello""#)
        // Some of it journaled first: else a loaded machine can hand the writer all 600 in its
        // first batch, which does not fit, and the journal records nothing before it stops.
        server.command("burst 50 1000")
        try await awaitStatus(socket, "the journal to record the first 50") { $0.journal?.newestSeq == 50 }
        // Then about 550 KB more into 256 KiB.
        server.command("burst 550 1000")
        // Live delivery goes on: every message, in order.
        #expect(await Self.waitForSeq(watcher, 600))
        #expect(Self.seqs(Self.feed(watcher, from: 0)) == Array(1...600))
        try await awaitStatus(socket, "the journal to stop") { $0.journal?.state == "stopped" }
        // Status and metrics say so.
        let json = try JSONValue.parse(try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", socket, "journal", "--json"]).stdout)
        #expect(json["state"] == "stopped" && json["stopped_reason"]?.stringValue?.contains("No space left") == true, "\(json)")
        let metrics = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", socket, "metrics"]).stdout
        #expect(metrics.contains("wsbridge_journal_stopped 1"), "\(metrics)")
        let status = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", socket, "status"]).stdout
        #expect(status.contains("STOPPED: cannot write"), "\(status)")
        // A consumer replaying from the start gets what the journal has, a not_durable gap for
        // what it does not, then the ring's last 100 (local.replay).
        let written = try #require(json["newest_seq"]?.intValue)
        #expect(written < 500, "\(json)")
        let (late, _, from) = try await Self.resume(socket, since: 0, stream: try #require(Self.watcherStream(watcher)), name: "late")
        #expect(await Self.waitForSeq(late, 600, from: from))
        let lines = Self.feed(late, from: from)
        #expect(Self.seqs(lines) == Array(1...written) + Array(501...600))
        let gaps = lines.filter { $0["type"] == "gap" }
        #expect(
            gaps.count == 1 && gaps.first?["reason"] == "not_durable" && gaps.first?["from"]?.intValue == written + 1 && gaps.first?["next"] == 501, "\(gaps)")
    }

    static func watcherStream(_ client: SocketClient) -> String? {
        client.lines.lines.first.flatMap { try? JSONValue.parse($0) }?["stream"]?.stringValue
    }
}
