import CWSBridgeLinux
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing
import WSBridgeCore

@testable import WSBridgeDaemon

/// The spool file's records, read back whole, torn at every byte, and damaged.
@Suite struct SpoolFormatTests {
    static func file(_ messages: [(UInt64, String)], delivered: UInt64? = nil) -> ByteBuffer {
        var b = SpoolFormat.header()
        for (id, text) in messages {
            SpoolFormat.write(kind: .text, id: id, payload: ByteBuffer(string: text), into: &b)
        }
        if let delivered { SpoolFormat.write(kind: .delivered, id: delivered, payload: nil, into: &b) }
        return b
    }

    static func texts(_ c: SpoolFormat.Contents) -> [String] {
        c.messages.map { String(buffer: $0.payload) }
    }

    @Test func crc32cMatchesTheStandardCheckValue() {
        let check = Array("123456789".utf8)
        #expect(cwsb_crc32c(0, check, check.count) == 0xE306_9283)
        // Continuing a CRC over a split gives the CRC of the whole, at every split.
        for cut in 0...check.count {
            let first = cwsb_crc32c(0, Array(check[..<cut]), cut)
            #expect(cwsb_crc32c(first, Array(check[cut...]), check.count - cut) == 0xE306_9283)
        }
        // Lengths that exercise the 8-byte path and its tail.
        let long = [UInt8](repeating: 0, count: 32)
        #expect(cwsb_crc32c(0, long, 32) == 0x8A91_36AA)  // RFC 3720 B.4: 32 bytes of zeros
    }

    @Test func recordsReadBackInOrderAndDeliveredOnesAreLeftOut() throws {
        let contents = try SpoolFormat.read(Self.file([(1, "a"), (2, "b"), (3, "c")], delivered: 1))
        #expect(Self.texts(contents) == ["b", "c"])
        #expect(contents.lastID == 3)
        #expect(contents.deliveredThrough == 1)
        #expect(contents.skipped.isEmpty && contents.truncatedAt == nil)
    }

    @Test func aFileCutAtAnyByteKeepsEveryWholeRecordAndNoMore() throws {
        let whole = Self.file([(1, "first"), (2, "second"), (3, "third message")])
        let records = [16, 16 + 17 + 5, 16 + 17 + 5 + 17 + 6, whole.readableBytes]
        for size in 0...whole.readableBytes {
            let cut = whole.getSlice(at: 0, length: size)!
            let contents = try SpoolFormat.read(cut)
            let kept = records.dropFirst().filter { $0 <= size }.count
            #expect(Self.texts(contents) == Array(["first", "second", "third message"].prefix(kept)), "cut at \(size)")
            let torn = size >= 16 && !records.contains(size)
            #expect((contents.truncatedAt != nil) == torn, "cut at \(size)")
            if let t = contents.truncatedAt {
                #expect(t.offset == records.last { $0 <= size })
                #expect(contents.discardedBytes == size - t.offset)
            }
        }
    }

    @Test func aDamagedRecordBetweenGoodOnesIsSkippedAlone() throws {
        var file = Self.file([(1, "one"), (2, "two"), (3, "three")])
        // A bit flipped in the second record's payload.
        let at = 16 + 17 + 3 + 17
        file.setInteger(file.getInteger(at: at, as: UInt8.self)! ^ 0x20, at: at)
        let contents = try SpoolFormat.read(file)
        #expect(Self.texts(contents) == ["one", "three"])
        #expect(contents.skipped.count == 1)
        #expect(contents.skipped.first?.offset == 16 + 17 + 3)
        #expect(contents.truncatedAt == nil)
    }

    @Test func aDamagedLengthEndsTheReadablePart() throws {
        var file = Self.file([(1, "one"), (2, "two"), (3, "three")])
        // The second record's length now points into the third: nothing after it can be trusted.
        file.setInteger(UInt32(13), at: 16 + 17 + 3, endianness: .little)
        let contents = try SpoolFormat.read(file)
        #expect(Self.texts(contents) == ["one"])
        #expect(contents.truncatedAt?.offset == 16 + 17 + 3)
    }

    @Test func garbageAfterTheLastRecordIsCut() throws {
        var file = Self.file([(1, "one")])
        file.writeBytes([0xFF, 0xFF, 0xFF, 0x7F, 1, 2, 3, 4, 5, 6, 7, 8, 9])
        let contents = try SpoolFormat.read(file)
        #expect(Self.texts(contents) == ["one"])
        #expect(contents.truncatedAt?.offset == 16 + 17 + 3)
        #expect(contents.discardedBytes == 13)
    }

    @Test func aForeignFileOrANewerVersionIsRefusedNotRead() {
        #expect(throws: SpoolFormat.HeaderProblem.self) { try SpoolFormat.read(ByteBuffer(string: "# some other file, long enough\n")) }
        var newer = SpoolFormat.header()
        newer.setInteger(UInt32(2), at: 8, endianness: .little)
        do {
            _ = try SpoolFormat.read(newer)
            Issue.record("a newer version was read")
        } catch {
            #expect("\(error)".contains("version 2"))
        }
        // Shorter than the header: a file whose creation was cut short, read as empty.
        #expect((try? SpoolFormat.read(ByteBuffer(string: "wsb")))?.messages.isEmpty == true)
    }
}
