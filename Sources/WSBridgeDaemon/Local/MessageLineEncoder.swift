import ExtrasBase64
import NIOCore
import WSBridgeProtocol

/// Encodes daemon → client lines. Each upstream message is encoded once into a buffer that all
/// subscribers share.
enum MessageLineEncoder {
    /// `{"type":"message","seq":N,"ts":MILLIS,"kind":"text","data":"..."}` + newline.
    /// With `inlineJSON`, a text payload that is JSON goes in `"json"` instead of `"data"`.
    /// Sized exactly before it is written (the escaped length is counted first): one allocation,
    /// one pass over the payload, no closure per run.
    static func message(seq: UInt64, _ message: UpstreamMessage, inlineJSON: Bool, parsed: JSONValue?, allocator: ByteBufferAllocator) -> ByteBuffer {
        var ts = TimestampDigits()
        return Self.message(seq: seq, message, inlineJSON: inlineJSON, parsed: parsed, allocator: allocator, ts: &ts)
    }

    /// `ts`: the digits of the last receive time, kept by the caller (the messages of one socket
    /// read share their receive time: it is written out once).
    static func message(
        seq: UInt64, _ message: UpstreamMessage, inlineJSON: Bool, parsed: JSONValue?, allocator: ByteBufferAllocator, ts: inout TimestampDigits
    ) -> ByteBuffer {
        var out = allocator.buffer(capacity: 0)
        Self.write(seq: seq, message, inlineJSON: inlineJSON, parsed: parsed, into: &out, ts: &ts)
        return out
    }

    /// Appends the message's line to `out` (the fan-out writes the lines of one socket read one
    /// after another into one buffer).
    static func write(seq: UInt64, _ message: UpstreamMessage, inlineJSON: Bool, parsed: JSONValue?, into out: inout ByteBuffer, ts: inout TimestampDigits) {
        var inline: [UInt8]?
        if message.kind == .text, inlineJSON, let parsed {
            var json: [UInt8] = []
            parsed.write(into: &json)
            inline = json
        }
        message.data.withUnsafeReadableBytes { payload in
            let payloadLength: Int
            switch message.kind {
            case .text: payloadLength = inline?.count ?? JSONWriter.escapedCount(utf8: payload)
            case .binary: payloadLength = Base64.encodedLength(payload.count)
            }
            if message.kind == .text, inline == nil {
                // The common case in one write: every piece copied straight into the buffer.
                out.writeWithUnsafeMutableBytes(minimumWritableBytes: payloadLength + 96) { dst in
                    var o = 0
                    func put(_ s: StaticString) {
                        (dst.baseAddress! + o).copyMemory(from: s.utf8Start, byteCount: s.utf8CodeUnitCount)
                        o += s.utf8CodeUnitCount
                    }
                    put(MessageLine.head)
                    o += JSONWriter.writeDigits(seq, into: UnsafeMutableRawBufferPointer(rebasing: dst[o...]))
                    put(MessageLine.tsKey)
                    o += ts.write(UInt64(max(0, message.receivedAtMillis)), into: UnsafeMutableRawBufferPointer(rebasing: dst[o...]))
                    put(MessageLine.textData)
                    o += JSONWriter.writeEscaped(utf8: payload, into: UnsafeMutableRawBufferPointer(rebasing: dst[o...]))
                    put(MessageLine.tail)
                    return o
                }
                return
            }
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
    private var value: UInt64 = .max
    private var count = 0
    private var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)

    /// Writes `value`'s digits into `out` (at least 20 bytes); returns how many.
    mutating func write(_ value: UInt64, into out: UnsafeMutableRawBufferPointer) -> Int {
        if value != self.value {
            self.value = value
            self.count = withUnsafeMutableBytes(of: &self.digits) { JSONWriter.writeDigits(value, into: $0) }
        }
        let count = self.count
        withUnsafeBytes(of: &self.digits) { out.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: count) }
        return count
    }
}

extension Base64 {
    /// Padded base64's length for `count` bytes.
    static func encodedLength(_ count: Int) -> Int { (count + 2) / 3 * 4 }
}
