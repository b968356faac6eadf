import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing
import WSBridgeCore
import WSBridgeProtocol

@testable import WSBridgeDaemon

/// The journal on real files: what a clean stop, a crash, a torn tail, a damaged record,
/// retention and a full disk leave, and what a replay reads back.
@Suite struct JournalFileTests {
    static let loop = MultiThreadedEventLoopGroup.singleton.next()

    static func configuration(_ dir: String, segmentBytes: Int = 64 << 20, maxBytes: Int = 1 << 30, fsync: Configuration.FsyncPolicy = .batch)
        -> Configuration.Journal
    {
        var c = Configuration.Journal()
        c.dir = dir
        c.segmentBytes = segmentBytes
        c.maxBytes = maxBytes
        c.fsync = fsync
        return c
    }

    static func open(_ c: Configuration.Journal) throws -> (Journal, Journal.Recovered) {
        try Journal.open(configuration: c, eventLoop: Self.loop, logger: Logger(label: "test"))
    }

    /// Receive times of now (retention by age removes what is older than a day).
    static let base = WallClock.millisecondsSinceEpoch()

    static func entry(_ seq: UInt64, size: Int = 0) -> Journal.Entry {
        let text = size > 0 ? "m\(seq) " + String(repeating: "x", count: size) : "m\(seq)"
        return Journal.Entry(seq: seq, message: UpstreamMessage(kind: .text, data: ByteBuffer(string: text), receivedAtMillis: Self.base + Int64(seq)))
    }

    /// Appends seqs `range` (in reads of `perRead`) and waits until the writer wrote the last.
    static func write(_ journal: Journal, _ range: ClosedRange<UInt64>, perRead: Int = 10, size: Int = 0) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let once = NIOLockedValueBox<CheckedContinuation<Void, Never>?>(continuation)
            journal.whenWritten { last in
                guard last >= range.upperBound,
                    let c = once.withLockedValue({ c in
                        defer { c = nil }
                        return c
                    })
                else { return }
                c.resume()
            }
            var seq = range.lowerBound
            while seq <= range.upperBound {
                let end = min(range.upperBound, seq + UInt64(perRead) - 1)
                journal.append((seq...end).map { Self.entry($0, size: size) })
                seq = end + 1
            }
        }
        journal.whenWritten(nil)
    }

    /// Everything a replay from `seq` reads, chunk by chunk until the end.
    static func readAll(_ journal: Journal, from seq: UInt64) async throws -> [Journal.Item] {
        var cursor = Journal.Cursor(from: seq)
        var items: [Journal.Item] = []
        while true {
            let chunk = try await journal.read(cursor, maxMessages: 100, maxBytes: 64 << 10, options: .init(inlineJSON: false, filter: nil)).get()
            items += chunk.items
            cursor = chunk.cursor
            if chunk.atEnd { return items }
        }
    }

    static func seqs(_ items: [Journal.Item]) -> [UInt64] {
        items.compactMap { if case .message(let seq, _) = $0 { seq } else { nil } }
    }

    static func gaps(_ items: [Journal.Item]) -> [GapLine] {
        items.compactMap { if case .gap(let g) = $0 { g } else { nil } }
    }

    static func segmentFiles(_ dir: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).filter { $0.hasSuffix(".wsj") }.sorted()
    }

    static func truncate(_ path: String, by bytes: Int) throws {
        let size = try FileManager.default.attributesOfItem(atPath: path)[.size] as! Int
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try handle.truncate(atOffset: UInt64(size - bytes))
        try handle.close()
    }

    @Test func aCleanStopContinuesTheStreamAndEveryMessageReadsBack() async throws {
        let dir = try TemporaryDirectory()
        let c = Self.configuration(dir.file("journal"))
        var (journal, recovered) = try Self.open(c)
        #expect(recovered.lastSeq == 0 && recovered.clean)
        let stream = recovered.stream
        await Self.write(journal, 1...500)
        try await journal.close(lastSeq: 500).get()
        (journal, recovered) = try Self.open(c)
        #expect(recovered.stream == stream && recovered.lastSeq == 500 && recovered.clean && recovered.previousStream == nil)
        await Self.write(journal, 501...600)
        let items = try await Self.readAll(journal, from: 1)
        #expect(Self.seqs(items) == Array(1...600))
        #expect(Self.gaps(items).isEmpty)
        // The lines are the live feed's.
        if case .message(_, let line?) = items[41] {
            let json = try JSONValue.parse(line.readableBytesView)
            #expect(MessageLine(json: json)?.data == "m42" && MessageLine(json: json)?.ts == Self.base + 42)
        } else {
            Issue.record("no line for seq 42")
        }
        // A replay from the middle starts there.
        #expect(Self.seqs(try await Self.readAll(journal, from: 377)) == Array(377...600))
        #expect(journal.statistics.oldestSeq == 1 && journal.statistics.newestSeq == 600 && journal.statistics.segments == 1)
        try await journal.close(lastSeq: 600).get()
    }

    @Test func aCrashStartsANewStreamAfterTheLastRecordAndSaysSoAtTheBoundary() async throws {
        let dir = try TemporaryDirectory()
        let c = Self.configuration(dir.file("journal"))
        var (journal, recovered) = try Self.open(c)
        let first = recovered.stream
        await Self.write(journal, 1...300)
        try await journal.close(lastSeq: 300).get()
        // A crash after the writer's last write leaves the file without its closed record.
        try Self.truncate(dir.file("journal/" + Self.segmentFiles(dir.file("journal")).last!), by: JournalFormat.recordOverhead)
        (journal, recovered) = try Self.open(c)
        #expect(!recovered.clean && recovered.lastSeq == 300 && recovered.previousStream == first && recovered.stream != first)
        await Self.write(journal, 301...310)
        let items = try await Self.readAll(journal, from: 1)
        #expect(Self.seqs(items) == Array(1...310))
        let gaps = Self.gaps(items)
        #expect(gaps.count == 1)
        #expect(gaps.first?.reason == GapLine.notDurable && gaps.first?.next == 301 && gaps.first?.stream == Journal.streamID(recovered.stream))
        // A consumer of the old stream: where its durable part ended.
        #expect(journal.earlierStream(Journal.streamID(first))?.end == 300)
        #expect(journal.earlierStream(Journal.streamID(recovered.stream)) == nil)
        try await journal.close(lastSeq: 310).get()
    }

    @Test func aTornTailIsCutAndADamagedRecordIsSkippedAndSaid() async throws {
        let dir = try TemporaryDirectory()
        let c = Self.configuration(dir.file("journal"))
        var (journal, _) = try Self.open(c)
        await Self.write(journal, 1...20)
        try await journal.close(lastSeq: 20).get()
        let path = dir.file("journal/" + Self.segmentFiles(dir.file("journal")).last!)
        // Record 7's payload gets a flipped byte; half a record is appended (a torn write).
        var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        let record7 = JournalFormat.headerSize + 6 * (JournalFormat.recordOverhead + 2) + JournalFormat.recordOverhead
        #expect(bytes[record7] == UInt8(ascii: "m"))
        bytes[record7] ^= 0x20
        var torn = ByteBuffer()
        JournalFormat.write(kind: .text, seq: 21, millis: 0, payload: ByteBuffer(string: "torn"), into: &torn)
        bytes.append(contentsOf: torn.readableBytesView.prefix(15))
        try bytes.write(to: URL(fileURLWithPath: path))
        let recovered: Journal.Recovered
        (journal, recovered) = try Self.open(c)
        #expect(recovered.lastSeq == 20 && !recovered.clean)
        let items = try await Self.readAll(journal, from: 1)
        #expect(Self.seqs(items) == Array(1...6) + Array(8...20))
        let gaps = Self.gaps(items)
        #expect(gaps.map(\.reason) == [GapLine.damaged, GapLine.notDurable])
        #expect(gaps.first?.from == 7 && gaps.first?.to == 7 && gaps.first?.next == 8)
        try await journal.close(lastSeq: 20).get()
    }

    @Test func retentionRemovesWholeSegmentsAndAnOlderSinceGetsExpiredFirst() async throws {
        let dir = try TemporaryDirectory()
        // fsync always: with batch, the timed fdatasync after the last write applies retention
        // again, and could remove the oldest segment while the replay below reads it (which the
        // replay would rightly call expired, but not where this test expects it).
        let c = Self.configuration(dir.file("journal"), segmentBytes: 64 << 10, maxBytes: 1 << 20, fsync: .always)
        let (journal, _) = try Self.open(c)
        // About 3 MiB of 1 KiB messages: 48 segments' worth, the journal keeps 1 MiB of them.
        await Self.write(journal, 1...3000, size: 1000)
        let stats = journal.statistics
        #expect(stats.bytes <= (1 << 20) + (64 << 10), "\(stats)")
        #expect(stats.segments == Self.segmentFiles(dir.file("journal")).count)
        let oldest = try #require(stats.oldestSeq)
        #expect(oldest > 1 && stats.newestSeq == 3000)
        let items = try await Self.readAll(journal, from: 1)
        guard case .gap(let gap)? = items.first else {
            Issue.record("no gap first: \(items.prefix(2))")
            return
        }
        #expect(gap.reason == GapLine.expired && gap.from == 1 && gap.to == oldest - 1 && gap.next == oldest)
        #expect(Self.seqs(items) == Array(oldest...3000))
        try await journal.close(lastSeq: 3000).get()
    }

    @Test func theLockKeepsASecondDaemonOff() async throws {
        let dir = try TemporaryDirectory()
        let c = Self.configuration(dir.file("journal"))
        let (journal, _) = try Self.open(c)
        #expect(throws: Journal.Failure.self) { try Self.open(c) }
        do {
            _ = try Self.open(c)
        } catch {
            #expect("\(error)".contains("in use by another wsbridged"), "\(error)")
        }
        try await journal.close(lastSeq: 0).get()
    }

    /// 400 KiB into 256 KiB, handed over a message at a time (the writer takes them in batches
    /// of any size) or all in one batch (one write the disk takes only part of): the writer
    /// keeps the whole records that fit, stops, and says so.
    @Test(.enabled(if: geteuid() == 0, "needs root to mount a small tmpfs"), arguments: [false, true])
    func aFullDiskStopsTheJournalAndLeavesOnlyWholeRecords(oneBatch: Bool) async throws {
        let dir = try TemporaryDirectory()
        let small = try dir.mountSmallTmpfs(size: "256k")
        let c = Self.configuration(small + "/journal", segmentBytes: 1 << 20, maxBytes: 1 << 30)
        let (journal, _) = try Self.open(c)
        if oneBatch {
            journal.append((UInt64(1)...400).map { Self.entry($0, size: 1000) })
        } else {
            for seq in UInt64(1)...400 {
                journal.append([Self.entry(seq, size: 1000)])
            }
        }
        try await journal.barrier().get()
        let stats = journal.statistics
        #expect(stats.stopped?.contains("No space left") == true, "\(stats)")
        let newest = try #require(stats.newestSeq)
        #expect(newest > 10 && newest < 400, "\(stats)")
        // The stop's two small records (the hole, the clean stop) still fit.
        try await journal.close(lastSeq: 400).get()
        // What is on disk reads back whole, in order, and the rest is said to be missing.
        let (again, recovered) = try Self.open(c)
        #expect(recovered.lastSeq == 400)
        let items = try await Self.readAll(again, from: 1)
        #expect(Self.seqs(items) == Array(1...newest))
        let gaps = Self.gaps(items)
        #expect(gaps.count == 1 && gaps.first?.reason == GapLine.notDurable && gaps.first?.from == newest + 1 && gaps.first?.to == 400, "\(gaps)")
        try await again.close(lastSeq: 400).get()
    }
}
