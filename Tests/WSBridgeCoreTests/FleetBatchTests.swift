import Testing
import WSBridgeCore

/// `fleet.batch`: a batch's bytes, and the numbers of the stream's messages.
struct FleetBatchTests {
    static func batch(_ messages: [(Bool, String)]) -> [UInt8] {
        var out: [UInt8] = []
        for (binary, text) in messages {
            var text = text
            text.withUTF8 { FleetBatch.append(binary: binary, UnsafeRawBufferPointer($0), to: &out) }
        }
        return out
    }

    static func items(_ bytes: [UInt8], _ count: Int) throws -> [(Bool, String)] {
        let items = try bytes.withUnsafeBytes { try FleetBatch.items(of: $0, count: count) }
        return items.map { ($0.binary, String(decoding: bytes[$0.range], as: UTF8.self)) }
    }

    @Test func aBatchHoldsItsMessagesInOrderWithTheirKinds() throws {
        let bytes = Self.batch([(false, #"{"p":1}"#), (true, "\u{0}\u{1}"), (false, "")])
        #expect(bytes.count == 7 + 2 + 0 + 3 * FleetBatch.overhead)
        let back = try Self.items(bytes, 3)
        #expect(back.map(\.0) == [false, true, false])
        #expect(back.map(\.1) == [#"{"p":1}"#, "\u{0}\u{1}", ""])
    }

    @Test func aBatchThatIsNotOneSaysWhy() {
        let bytes = Self.batch([(false, "abc"), (false, "de")])
        let cases: [([UInt8], Int, String)] = [
            (bytes, 3, "it holds 2 message(s), and Wsbridge-Batch says 3"),
            (bytes, 0, "is not a count from 1 to 1000"),
            (Array(bytes.dropLast()), 2, "message 2 says 2 bytes, and 1 are left"),
            (Array(bytes.prefix(10)), 2, "message 2 is cut short at byte 8"),
            ([7, 0, 0, 0, 0], 1, "message 1 has kind 7"),
        ]
        for (bytes, count, says) in cases {
            #expect {
                _ = try Self.items(bytes, count)
            } throws: { error in
                "\(error)".contains(says)
            }
        }
    }

    @Test func aMessageWithoutANumberIsNumberedByItsStreamSeq() {
        #expect(FleetBatch.Numbers(first: nil, count: 1).last(at: 42) == 42)
        #expect(FleetBatch.Numbers(first: 100, count: 5).last(at: 42) == 104)
    }

    @Test func theNextNumberIsAboveEveryNumberGivenBefore() {
        // A stream that never had a message: 1.
        #expect(FleetBatch.next(lastSeq: 0, numbered: nil, known: nil) == 1)
        // After a numbered one: the one after its last, and never below the next stream seq
        // (a message without a number after it is numbered by its stream seq).
        #expect(FleetBatch.next(lastSeq: 10, numbered: 500, known: nil) == 501)
        #expect(FleetBatch.next(lastSeq: 900, numbered: 500, known: nil) == 901)
        // This bridge's own count, when it is ahead.
        #expect(FleetBatch.next(lastSeq: 10, numbered: 500, known: 620) == 620)
        // None to read (purged, or none numbered lately) and nothing known: past any number a
        // stream of 10 messages can have given (each holds at most 1000).
        #expect(FleetBatch.next(lastSeq: 10, numbered: nil, known: nil) == 11_000)
        #expect(FleetBatch.next(lastSeq: 10, numbered: nil, known: 700) == 700)
    }
}
