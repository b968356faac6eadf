import NIOCore
import Testing
import WSBridgeCore

@testable import WSBridgeDaemon

/// The spool's rules without a disk: what each write carries, when the file is cut back, when
/// it is compacted, and what a file read back at start needs.
@Suite struct SpoolLedgerTests {
    static func entry(_ id: UInt64, _ text: String = "m") -> Spool.Entry {
        Spool.Entry(id: id, kind: .text, data: ByteBuffer(string: text))
    }

    static func record(_ e: Spool.Entry) -> Int { SpoolFormat.recordOverhead + e.data.readableBytes }

    @Test func appendsCarryADeliveredMarkerOnlyWhenThereIsNews() {
        var ledger = SpoolLedger()
        #expect(ledger.step(appending: false) == .none)
        #expect(ledger.step(appending: true) == .append(deliveredMarker: nil))
        let three = (1...3).map { Self.entry($0) }
        ledger.wrote(three, bytes: three.map(Self.record).reduce(0, +))
        #expect(ledger.fileIsExact)
        ledger.delivered(through: 2)
        #expect(ledger.entries.map(\.id) == [3])
        // Some stay live: the marker is written (alone or ahead of appends), once.
        #expect(ledger.step(appending: false) == .append(deliveredMarker: 2))
        ledger.wrote([], bytes: SpoolFormat.recordOverhead)
        #expect(ledger.step(appending: false) == .none)
        #expect(ledger.step(appending: true) == .append(deliveredMarker: nil))
        // An older report changes nothing.
        ledger.delivered(through: 1)
        #expect(ledger.step(appending: false) == .none)
    }

    @Test func whenNothingIsLeftTheFileIsCutBackToItsHeader() {
        var ledger = SpoolLedger()
        let two = [Self.entry(1), Self.entry(2)]
        ledger.wrote(two, bytes: two.map(Self.record).reduce(0, +))
        ledger.delivered(through: 2)
        #expect(ledger.entries.isEmpty)
        #expect(ledger.step(appending: false) == .cutToHeader)
        // With new appends in the same batch, they are written after a marker instead.
        #expect(ledger.step(appending: true) == .append(deliveredMarker: 2))
        ledger.cut(to: SpoolFormat.headerSize)
        #expect(ledger.fileSize == SpoolFormat.headerSize)
        #expect(ledger.step(appending: false) == .none)
    }

    @Test func deadRecordsAreCompactedOnceTheyOutweighTheLiveOnesAndTheSlack() throws {
        var ledger = SpoolLedger()
        let big = String(repeating: "x", count: 64 * 1024)
        var id: UInt64 = 0
        // The newest message stays live; the delivered ones before it pile up in the file.
        while !ledger.shouldCompact {
            id += 1
            let e = Self.entry(id, big)
            ledger.wrote([e], bytes: Self.record(e))
            ledger.delivered(through: id - 1)
            #expect(id < 100, "never compacts")
            if id >= 100 { return }
        }
        #expect(ledger.deadBytes > SpoolLedger.compactionSlack)
        #expect(id == 17, "64 KiB records: the 17th makes the dead ones pass 1 MiB")
        let file = ledger.compacted()
        let contents = try SpoolFormat.read(file)
        #expect(contents.messages.map(\.id) == [id])
        ledger.cut(to: file.readableBytes)
        #expect(ledger.deadBytes == 0)
        #expect(!ledger.shouldCompact)
    }

    @Test func liveRecordsKeepAFileFromCompactingUntilTheDeadOnesOutweighThem() {
        var ledger = SpoolLedger()
        let big = String(repeating: "y", count: 512 * 1024)
        // 4 MiB live, then 2 MiB delivered: dead > slack, but not > live.
        let live = (1...8).map { Self.entry($0, big) }
        ledger.wrote(live, bytes: live.map(Self.record).reduce(0, +))
        let dead = (9...12).map { Self.entry($0, big) }
        ledger.wrote(dead, bytes: dead.map(Self.record).reduce(0, +))
        #expect(ledger.entries.count == 12)
        #expect(!ledger.shouldCompact)
    }

    @Test func aFileReadBackIsExactOnlyWithoutDeliveredOrTornRecords() throws {
        var file = SpoolFormat.header()
        for id in 1...3 as ClosedRange<UInt64> {
            SpoolFormat.write(kind: .text, id: id, payload: ByteBuffer(string: "m\(id)"), into: &file)
        }
        let exact = SpoolLedger(restoring: try SpoolFormat.read(file), fileSize: file.readableBytes)
        #expect(exact.fileIsExact)
        #expect(exact.entries.map(\.id) == [1, 2, 3])

        SpoolFormat.write(kind: .delivered, id: 2, payload: nil, into: &file)
        let marked = SpoolLedger(restoring: try SpoolFormat.read(file), fileSize: file.readableBytes)
        #expect(!marked.fileIsExact)
        #expect(marked.entries.map(\.id) == [3])
        // Its rewrite holds exactly the live record.
        #expect(try SpoolFormat.read(marked.compacted()).messages.map(\.id) == [3])
    }
}
