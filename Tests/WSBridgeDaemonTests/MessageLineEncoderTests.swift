import NIOCore
import Testing
import WSBridgeProtocol

@testable import WSBridgeDaemon

/// The byte-level message encoder (the hot path) writes exactly the schema `MessageLine` reads.
@Suite struct MessageLineEncoderTests {
    @Test func encodedLinesDecodeAsMessageLines() throws {
        let allocator = ByteBufferAllocator()
        let text = UpstreamMessage(kind: .text, data: ByteBuffer(string: "say \"hi\"\n\u{1}é"), receivedAtMillis: 1_795_313_566_992)
        var line = MessageLineEncoder.message(seq: 42, text, inlineJSON: false, parsed: nil, allocator: allocator)
        #expect(line.readableBytesView.last == UInt8(ascii: "\n"))
        let decoded = MessageLine(json: try JSONValue.parse(line.readString(length: line.readableBytes - 1)!))
        #expect(decoded == MessageLine(seq: 42, ts: 1_795_313_566_992, kind: .text, data: "say \"hi\"\n\u{1}é"))

        let binary = UpstreamMessage(kind: .binary, data: ByteBuffer(bytes: [0, 1, 2, 255]), receivedAtMillis: 7)
        var b = MessageLineEncoder.message(seq: UInt64.max, binary, inlineJSON: false, parsed: nil, allocator: allocator)
        #expect(
            MessageLine(json: try JSONValue.parse(b.readString(length: b.readableBytes - 1)!)) == MessageLine(seq: .max, ts: 7, kind: .binary, data: "AAEC/w==")
        )

        let payload = #"{"n":1234567890123456789}"#
        let json = UpstreamMessage(kind: .text, data: ByteBuffer(string: payload), receivedAtMillis: 1)
        var i = MessageLineEncoder.message(seq: 1, json, inlineJSON: true, parsed: try JSONValue.parse(payload), allocator: allocator)
        let inline = MessageLine(json: try JSONValue.parse(i.readString(length: i.readableBytes - 1)!))
        #expect(inline?.inlineJSON == (try JSONValue.parse(payload)))
    }

    /// The receive time's digits are kept between messages: a repeated time reuses them, a new
    /// one (longer, shorter, zero) is written afresh.
    @Test func timestampDigitsFollowEachMessagesTime() throws {
        var ts = TimestampDigits()
        for (seq, millis) in [(1, 1_795_313_566_992), (2, 1_795_313_566_992), (3, 5), (4, 0), (5, 12_345_678_901_234_567), (6, 5)] as [(UInt64, Int64)] {
            let message = UpstreamMessage(kind: .text, data: ByteBuffer(string: "m\(seq)"), receivedAtMillis: millis)
            var line = ByteBuffer()
            MessageLineEncoder.write(seq: seq, message, inlineJSON: false, parsed: nil, into: &line, ts: &ts)
            let decoded = MessageLine(json: try JSONValue.parse(line.readString(length: line.readableBytes - 1)!))
            #expect(decoded == MessageLine(seq: seq, ts: millis, kind: .text, data: "m\(seq)"))
        }
    }

    /// A routed message whose id its app knows by another (issue 46) is written with the id's
    /// bytes replaced as the line is written: the same line as the replaced message's, escapes
    /// before, in and after the id, ids shorter and longer, at the start and the end, and with
    /// more to escape than the usual room.
    @Test func aSplicedIDWritesTheLineOfTheReplacedMessage() throws {
        let texts = ["MESSAGE\nsubscription:1\n\n{\"p\":\"x\"}\u{0}", "\u{1}\"1\"\t", "1", String(repeating: "\u{1}", count: 100) + "12"]
        for text in texts {
            let bytes = Array(text.utf8)
            let at = bytes.firstIndex(of: UInt8(ascii: "1"))!
            for id in ["s", "", "a\\c\"é", String(repeating: "\u{2}", count: 50)] {
                for (lower, upper) in [(at, at + 1), (0, at + 1), (at, bytes.count)] {
                    var replaced = bytes
                    replaced.replaceSubrange(lower..<upper, with: Array(id.utf8))
                    var expected = ByteBuffer()
                    var spliced = ByteBuffer()
                    var ts = TimestampDigits()
                    MessageLineEncoder.write(
                        seq: 9, UpstreamMessage(kind: .text, data: ByteBuffer(bytes: replaced), receivedAtMillis: 5), inlineJSON: false, parsed: nil,
                        into: &expected, ts: &ts)
                    MessageLineEncoder.write(
                        seq: 9, text: ByteBuffer(bytes: bytes), receivedAtMillis: 5, splicing: lower..<upper, with: ByteBuffer(string: id), into: &spliced,
                        ts: &ts)
                    #expect(String(buffer: spliced) == String(buffer: expected), "\(text.debugDescription) \(lower)..<\(upper) as \(id.debugDescription)")
                }
            }
        }
    }

    /// A text is written in one pass into room for an eighth more than itself; one with more to
    /// escape than that (control characters take six bytes each) is counted, then written
    /// exactly. Both decode to what was sent, next to other lines in the same buffer.
    @Test func textsWithFewOrManyEscapesAreWrittenWhole() throws {
        var out = ByteBuffer()
        var ts = TimestampDigits()
        let texts = ["plain " + String(repeating: "x", count: 300), String(repeating: "\u{1}\"", count: 60), "é\n", ""]
        for (i, text) in texts.enumerated() {
            let message = UpstreamMessage(kind: .text, data: ByteBuffer(string: text), receivedAtMillis: 1_795_313_566_992)
            MessageLineEncoder.write(seq: UInt64(i + 1), message, inlineJSON: false, parsed: nil, into: &out, ts: &ts)
        }
        let lines = String(buffer: out).split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        #expect(lines.count == texts.count)
        for (i, line) in lines.enumerated() {
            #expect(MessageLine(json: try JSONValue.parse(String(line))) == MessageLine(seq: UInt64(i + 1), ts: 1_795_313_566_992, kind: .text, data: texts[i]))
        }
    }

    /// The last line of a read goes into what its buffer has left when that holds the payload
    /// and a few escapes, even if less than the usual eighth to spare: the fan-out's buffer,
    /// started at the last read's size and a quarter, is not grown (copied) for it. A payload
    /// with more to escape than the room left is still written whole.
    @Test func aLineThatFitsWhatTheBufferHasLeftDoesNotGrowIt() throws {
        let payload = #"{\"t\":1,\"p\":\""# + String(repeating: "x", count: 4096) + #"\"}"#
        for (text, grows) in [(payload, false), (String(repeating: "\"", count: 4096), true)] {
            let size = text.utf8.count + 16 + MessageLineEncoder.lineOverhead
            // Earlier lines took all but `size` bytes of the buffer (whose capacity is a power of 2).
            var out = ByteBufferAllocator().buffer(capacity: size)
            out.writeRepeatingByte(UInt8(ascii: " "), count: out.capacity - size)
            out.moveReaderIndex(to: out.writerIndex)
            let capacity = out.capacity
            var ts = TimestampDigits()
            let message = UpstreamMessage(kind: .text, data: ByteBuffer(string: text), receivedAtMillis: 1_795_313_566_992)
            MessageLineEncoder.write(seq: 7, message, inlineJSON: false, parsed: nil, into: &out, ts: &ts)
            #expect((out.capacity != capacity) == grows, "\(text.prefix(8))…: capacity \(capacity) → \(out.capacity)")
            let line = out.readString(length: out.readableBytes - 1) ?? ""
            #expect(MessageLine(json: try JSONValue.parse(line)) == MessageLine(seq: 7, ts: 1_795_313_566_992, kind: .text, data: text))
        }
    }

    /// A send's constant reply, written for an id straight into a buffer, is the line the
    /// reply's JSON encodes, for every kind of id.
    @Test(arguments: [nil, JSONValue.number(1), .number(JSONNumber(validatedText: "12345678901234567890")), .number(-1.5), .string("a\"b\u{1}"), .string("é")])
    func aConstantReplyIsTheEncodedOne(id: JSONValue?) {
        let constant = ReplyLine.Constant(result: SendResult.sent.json)
        let fast = constant.line(id: id, allocator: ByteBufferAllocator())
        #expect(String(buffer: fast) == ReplyLine.ok(id: id, SendResult.sent.json).json.serialized + "\n")
    }
}
