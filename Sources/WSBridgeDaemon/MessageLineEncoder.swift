import ExtrasBase64
import NIOCore
import WSBridgeProtocol

/// Encodes daemon → client lines. Each upstream message is encoded once into a buffer that all
/// subscribers share.
enum MessageLineEncoder {
    /// `{"type":"message","seq":N,"ts":MILLIS,"kind":"text","data":"..."}` + newline.
    /// With `inlineJSON`, a text payload that is JSON goes in `"json"` instead of `"data"`.
    static func message(seq: UInt64, _ message: UpstreamMessage, inlineJSON: Bool, parsed: JSONValue?, allocator: ByteBufferAllocator) -> ByteBuffer {
        var out: [UInt8] = []
        out.reserveCapacity(message.data.readableBytes + 80)
        out.append(contentsOf: #"{"type":"message","seq":"#.utf8)
        JSONWriter.writeInteger(seq, into: &out)
        out.append(contentsOf: #","ts":"#.utf8)
        JSONWriter.writeInteger(message.receivedAtMillis, into: &out)
        switch message.kind {
        case .text:
            if inlineJSON, let parsed {
                out.append(contentsOf: #","kind":"text","json":"#.utf8)
                parsed.write(into: &out)
            } else {
                out.append(contentsOf: #","kind":"text","data":"#.utf8)
                message.data.withUnsafeReadableBytes { JSONWriter.writeString(utf8: $0, into: &out) }
            }
        case .binary:
            out.append(contentsOf: #","kind":"binary","data":""#.utf8)
            out.append(contentsOf: Base64.encodeToBytes(bytes: message.data.readableBytesView))
            out.append(UInt8(ascii: "\""))
        }
        out.append(contentsOf: "}\n".utf8)
        var buffer = allocator.buffer(capacity: out.count)
        buffer.writeBytes(out)
        return buffer
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
