import Foundation
import Logging
import NIOCore
import NIOPosix
import Testing
import WSBridgeCore
import WSBridgeProtocol

@testable import WSBridgeDaemon

/// Files written by an earlier wsbridged (before the spool, the journal and the sticky store
/// shared one durable log engine) open and replay: `Golden/durable-v1` holds a spool that
/// queued 1...5 with 1...2 delivered, its `sticky.json`, and a journal of 1...30 in two
/// segments stopped cleanly after 32 (31...32 never written: a hole). The fixtures are copied
/// first: opening rewrites a spool and appends to a journal.
@Suite struct DurableFormatTests {
    static let fixtures = "\(Paths.root)/Tests/WSBridgeIntegrationTests/Golden/durable-v1"

    static func copy(_ name: String, into dir: TemporaryDirectory) throws -> String {
        let to = dir.file(name)
        try FileManager.default.copyItem(atPath: "\(Self.fixtures)/\(name)", toPath: to)
        return to
    }

    @Test func anOldSpoolOpensAndReplaysItsUndeliveredMessagesInOrder() async throws {
        let dir = try TemporaryDirectory()
        let spoolDir = try Self.copy("spool", into: dir)
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        var (spool, restored) = try SpoolFileTests.open(spoolDir, loop)
        #expect(restored.entries.map(\.id) == [3, 4, 5])
        #expect(restored.entries.map { String(buffer: $0.data) } == ["queued 3", "queued 4", "queued 5"])
        #expect(restored.entries.map(\.kind) == [.text, .text, .binary])
        #expect(restored.lastID == 5)
        // It goes on where it stopped, and what it writes now reads back with the old records.
        try await SpoolFileTests.store(spool, .init(id: 6, kind: .text, data: ByteBuffer(string: "queued 6")))
        spool.delivered(through: 3)
        try await spool.close().get()
        (spool, restored) = try SpoolFileTests.open(spoolDir, loop)
        #expect(restored.entries.map(\.id) == [4, 5, 6])
        #expect(restored.lastID == 6)
        try await spool.close().get()
    }

    @Test func anOldStickyFileOpensWithItsKeys() async throws {
        let dir = try TemporaryDirectory()
        let spoolDir = try Self.copy("spool", into: dir)
        let (spool, _) = try SpoolFileTests.open(spoolDir, MultiThreadedEventLoopGroup.singleton.next())
        let (_, entries) = try StickyStore.open(spool: spool)
        try await spool.close().get()
        #expect(entries.map(\.key) == ["room"])
        #expect(entries.first?.payload == .text("{\"join\":\"room-1\"}"))
        #expect(entries.first?.onUnstick == "{\"leave\":\"room-1\"}")
        #expect(entries.first?.holds.first?.pid == 42)
    }

    @Test func anOldJournalOpensCleanAndReplaysEveryMessageAndItsHole() async throws {
        let dir = try TemporaryDirectory()
        let journalDir = try Self.copy("journal", into: dir)
        let (journal, recovered) = try JournalFileTests.open(JournalFileTests.configuration(journalDir, segmentBytes: 600))
        #expect(recovered.clean)
        #expect(recovered.lastSeq == 32)
        let items = try await JournalFileTests.readAll(journal, from: 1)
        #expect(JournalFileTests.seqs(items) == Array(1...30))
        let gaps = JournalFileTests.gaps(items)
        #expect(gaps.map(\.from) == [31])
        #expect(gaps.map(\.to) == [32])
        // The same stream goes on after the clean stop.
        await JournalFileTests.write(journal, 33...35)
        let after = try await JournalFileTests.readAll(journal, from: 29)
        #expect(JournalFileTests.seqs(after) == [29, 30, 33, 34, 35])
        try await journal.close(lastSeq: 35).get()
    }
}
