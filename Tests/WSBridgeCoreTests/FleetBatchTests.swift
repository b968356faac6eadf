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

/// What goes as the next message of the stream (`FleetBatch.count`).
struct FleetBatchCountTests {
    struct Waiting: FleetBatchCandidate {
        var seq: UInt64
        var byteCount = 100
        var alone = false
        var wentIn: UInt64? = nil
        var subject = "s"
    }

    static func queue(_ seqs: ClosedRange<UInt64>) -> [Waiting] { seqs.map { Waiting(seq: $0) } }

    @Test func asManyAsFitOfTheFirstOnesSubject() {
        #expect(FleetBatch.count(of: [Waiting](), max: 100, maxBytes: 1 << 19) == 0)
        #expect(FleetBatch.count(of: Self.queue(1...250), max: 100, maxBytes: 1 << 19) == 100)
        #expect(FleetBatch.count(of: Self.queue(1...30), max: 100, maxBytes: 1 << 19) == 30)
        // Bytes with their framing: 105 each, so 9 in 1,000 bytes.
        #expect(FleetBatch.count(of: Self.queue(1...30), max: 100, maxBytes: 1000) == 9)
        // A message past the bound alone still goes (alone).
        #expect(FleetBatch.count(of: [Waiting(seq: 1, byteCount: 5000)] + Self.queue(2...3), max: 100, maxBytes: 1000) == 1)
        // Subjects per message: up to the first of another subject.
        var mixed = Self.queue(1...6)
        mixed[3].subject = "t"
        #expect(FleetBatch.count(of: mixed, max: 100, maxBytes: 1 << 19, subject: { $0.subject }) == 3)
        #expect(FleetBatch.count(of: mixed, max: 100, maxBytes: 1 << 19) == 6, "one subject for all: not asked")
    }

    @Test func oneAppsMessageGoesAlone() {
        var queue = Self.queue(1...6)
        queue[2].alone = true
        #expect(FleetBatch.count(of: queue, max: 100, maxBytes: 1 << 19) == 2)
        #expect(FleetBatch.count(of: Array(queue.dropFirst(2)), max: 100, maxBytes: 1 << 19) == 1)
    }

    @Test func aBatchGoesAgainAsItWent() {
        // 1...4 went as one and failed: they go again as one, not with 5 and 6 (and a batch
        // that shrank, its first given up, keeps the rest together).
        var queue = Self.queue(1...6)
        for i in 0..<4 { queue[i].wentIn = 4 }
        #expect(FleetBatch.count(of: queue, max: 100, maxBytes: 1 << 19) == 4)
        #expect(FleetBatch.count(of: Array(queue.dropFirst()), max: 100, maxBytes: 1 << 19) == 3)
        // A new batch stops before one that went in a batch before.
        #expect(FleetBatch.count(of: Array(queue.suffix(2)) + queue.prefix(4), max: 100, maxBytes: 1 << 19) == 2)
    }
}
