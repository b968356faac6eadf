import ExtrasBase64
import NIOCore
import WSBridgeProtocol

/// Encodes daemon → client lines. Each upstream message is encoded once into a buffer that all
/// subscribers share.
enum MessageLineEncoder {
    /// `{"type":"message","seq":N,"ts":MILLIS,"kind":"text","data":"..."}` + newline, in a buffer
    /// of its own (see `write`).
    static func message(seq: UInt64, _ message: UpstreamMessage, inlineJSON: Bool, parsed: JSONValue?, allocator: ByteBufferAllocator) -> ByteBuffer {
        var out = allocator.buffer(capacity: 0)
        var ts = TimestampDigits()
        Self.write(seq: seq, message, inlineJSON: inlineJSON, parsed: parsed, into: &out, ts: &ts)
        return out
    }

    /// Appends the message's line to `out` (the fan-out writes the lines of one socket read one
    /// after another into one buffer). With `inlineJSON`, a text payload that is JSON goes in
    /// `"json"` instead of `"data"`. `ts`: the digits of the last receive time, kept by the
    /// caller (the messages of one read share their receive time: it is written out once).
    static func write(seq: UInt64, _ message: UpstreamMessage, inlineJSON: Bool, parsed: JSONValue?, into out: inout ByteBuffer, ts: inout TimestampDigits) {
        var inline: [UInt8]?
        if message.kind == .text, inlineJSON, let parsed {
            var json: [UInt8] = []
            parsed.write(into: &json)
            inline = json
        }
        message.data.withUnsafeReadableBytes { payload in
            if message.kind == .text, inline == nil {
                // The common case in one write, every piece copied straight into the buffer: with
                // room for an eighth more than the payload (its escapes), or what the buffer has
                // left when that is less but enough for a few escapes (no regrowth for the last
                // line of a read), the payload is read once; only a text with more to escape is
                // counted first, then written exactly.
                let ts = ts.digits(UInt64(max(0, message.receivedAtMillis)))
                let guess = payload.count + payload.count / 8 + 16
                let room = max(payload.count + 16, min(guess, out.writableBytes - Self.lineOverhead))
                if Self.writeText(seq: seq, ts: ts, payload, room: room, into: &out) { return }
                let exact = JSONWriter.escapedCount(utf8: payload)
                _ = Self.writeText(seq: seq, ts: ts, payload, room: exact, into: &out)
                return
            }
            let payloadLength = inline?.count ?? Base64.encodedLength(payload.count)
            out.reserveCapacity(minimumWritableBytes: payloadLength + Self.lineOverhead)
            out.writeStaticString(MessageLine.head)
            Self.writeDigits(seq, into: &out)
            out.writeStaticString(MessageLine.tsKey)
            Self.writeDigits(UInt64(max(0, message.receivedAtMillis)), into: &out)
            switch message.kind {
            case .text:
                out.writeStaticString(MessageLine.textJSON)
                out.writeBytes(inline ?? [])
            case .binary:
                out.writeStaticString(MessageLine.binaryData)
                out.writeBytes(Base64.encodeToBytes(bytes: payload))
                out.writeStaticString("\"")
            }
            out.writeStaticString(MessageLine.tail)
        }
    }

    /// Room for a line's fields around its payload: the keys, seq and ts (20 digits each at
    /// most), the kind and the newline.
    static let lineOverhead = 96

    /// A routed text message's line, the payload's bytes at `at` (of its readable bytes) written
    /// as `text` instead (the id its holder knows it by, issue 46): the message is read once,
    /// not copied into a message of its own first.
    static func write(
        seq: UInt64, text data: ByteBuffer, receivedAtMillis: Int64, splicing at: Range<Int>, with text: ByteBuffer, into out: inout ByteBuffer,
        ts: inout TimestampDigits
    ) {
        data.withUnsafeReadableBytes { payload in
            text.withUnsafeReadableBytes { text in
                let head = UnsafeRawBufferPointer(rebasing: payload[..<at.lowerBound])
                let tail = UnsafeRawBufferPointer(rebasing: payload[at.upperBound...])
                let ts = ts.digits(UInt64(max(0, receivedAtMillis)))
                let count = head.count + text.count + tail.count
                let guess = count + count / 8 + 16
                let room = max(count + 16, min(guess, out.writableBytes - Self.lineOverhead))
                if Self.writeText(seq: seq, ts: ts, head, text, tail, room: room, into: &out) { return }
                // (Each count has its quotes: two pairs too many, room to spare.)
                let exact = JSONWriter.escapedCount(utf8: head) + JSONWriter.escapedCount(utf8: text) + JSONWriter.escapedCount(utf8: tail)
                _ = Self.writeText(seq: seq, ts: ts, head, text, tail, room: exact, into: &out)
            }
        }
    }

    /// A text message's line, its payload escaped into at most `room` bytes; false (and nothing
    /// written) when that was not enough.
    private static func writeText(seq: UInt64, ts: TimestampDigits.Digits, _ payload: UnsafeRawBufferPointer, room: Int, into out: inout ByteBuffer) -> Bool {
        Self.writeText(
            seq: seq, ts: ts, payload, UnsafeRawBufferPointer(start: nil, count: 0), UnsafeRawBufferPointer(start: nil, count: 0), room: room, into: &out)
    }

    /// A text message's line whose payload is `payload`, `more` and `rest` one after another.
    private static func writeText(
        seq: UInt64, ts: TimestampDigits.Digits, _ payload: UnsafeRawBufferPointer, _ more: UnsafeRawBufferPointer, _ rest: UnsafeRawBufferPointer,
        room: Int, into out: inout ByteBuffer
    ) -> Bool {
        let written = out.writeWithUnsafeMutableBytes(minimumWritableBytes: room + Self.lineOverhead) { dst -> Int in
            var o = 0
            func put(_ s: StaticString) {
                (dst.baseAddress! + o).copyMemory(from: s.utf8Start, byteCount: s.utf8CodeUnitCount)
                o += s.utf8CodeUnitCount
            }
            put(MessageLine.head)
            o += JSONWriter.writeDigits(seq, into: UnsafeMutableRawBufferPointer(rebasing: dst[o...]))
            put(MessageLine.tsKey)
            o += ts.write(into: UnsafeMutableRawBufferPointer(rebasing: dst[o...]))
            put(MessageLine.textData)
            guard let n = JSONWriter.writeEscaped(utf8: payload, more, rest, ifRoomIn: UnsafeMutableRawBufferPointer(rebasing: dst[o..<(o + room)])) else {
                return 0
            }
            o += n
            put(MessageLine.tail)
            return o
        }
        return written > 0
    }

    private static func writeDigits(_ value: UInt64, into out: inout ByteBuffer) {
        out.writeWithUnsafeMutableBytes(minimumWritableBytes: 20) { JSONWriter.writeDigits(value, into: $0) }
    }

    /// Any JSON value as one line.
    static func line(_ value: JSONValue, allocator: ByteBufferAllocator) -> ByteBuffer {
        var out: [UInt8] = []
        value.write(into: &out)
        out.append(UInt8(ascii: "\n"))
        var buffer = allocator.buffer(capacity: out.count)
        buffer.writeBytes(out)
        return buffer
    }
}

/// The decimal digits of the last timestamp written, so that the messages of one socket read
/// (which share their receive time) do not each divide it out again.
struct TimestampDigits {
    /// A number's digits, ready to copy.
    struct Digits {
        fileprivate var bytes: (UInt64, UInt64, UInt64) = (0, 0, 0)
        fileprivate var count = 0

        /// Writes the digits into `out` (at least 20 bytes); returns how many.
        func write(into out: UnsafeMutableRawBufferPointer) -> Int {
            var bytes = self.bytes
            let count = self.count
            withUnsafeBytes(of: &bytes) { out.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: count) }
            return count
        }
    }

    private var value: UInt64 = .max
    private var last = Digits()

    /// `value`'s digits (worked out again only when it changed).
    mutating func digits(_ value: UInt64) -> Digits {
        if value != self.value {
            self.value = value
            self.last.count = withUnsafeMutableBytes(of: &self.last.bytes) { JSONWriter.writeDigits(value, into: $0) }
        }
        return self.last
    }
}

extension Base64 {
    /// Padded base64's length for `count` bytes.
    static func encodedLength(_ count: Int) -> Int { (count + 2) / 3 * 4 }
}

extension ReplyLine.Constant {
    /// The whole line for one request's id, newline included, written once into a buffer (a
    /// number's id as its text).
    func line(id: JSONValue?, allocator: ByteBufferAllocator) -> ByteBuffer {
        var buffer = allocator.buffer(capacity: self.head.count + self.tail.count + 24)
        buffer.writeBytes(self.head)
        switch id {
        case .number(let n)?:
            buffer.writeString(n.text)
        case nil:
            buffer.writeStaticString("null")
        case let other?:
            var bytes: [UInt8] = []
            other.write(into: &bytes)
            buffer.writeBytes(bytes)
        }
        buffer.writeBytes(self.tail)
        return buffer
    }
}
