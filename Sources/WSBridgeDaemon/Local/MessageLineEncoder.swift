import ExtrasBase64
import NIOCore
import WSBridgeProtocol

/// Encodes daemon → client lines. Each upstream message is encoded once into a buffer that all
/// subscribers share.
enum MessageLineEncoder {
    /// `{"type":"message","seq":N,"ts":MILLIS,"kind":"text","data":"..."}` + newline.
    /// With `inlineJSON`, a text payload that is JSON goes in `"json"` instead of `"data"`.
    static func message(seq: UInt64, _ message: UpstreamMessage, inlineJSON: Bool, parsed: JSONValue?, allocator: ByteBufferAllocator) -> ByteBuffer {
        // Written straight into the buffer all subscribers will share: one copy of the payload.
        var out = allocator.buffer(capacity: message.data.readableBytes + 96)
        out.writeStaticString(MessageLine.head)
        out.writeString(String(seq))
        out.writeStaticString(MessageLine.tsKey)
        out.writeString(String(message.receivedAtMillis))
        switch message.kind {
        case .text:
            if inlineJSON, let parsed {
                out.writeStaticString(MessageLine.textJSON)
                var json: [UInt8] = []
                parsed.write(into: &json)
                out.writeBytes(json)
            } else {
                out.writeStaticString(MessageLine.textData)
                message.data.withUnsafeReadableBytes { payload in
                    JSONWriter.writeString(utf8: payload) { out.writeBytes($0) }
                }
            }
        case .binary:
            out.writeStaticString(MessageLine.binaryData)
            out.writeBytes(Base64.encodeToBytes(bytes: message.data.readableBytesView))
            out.writeStaticString("\"")
        }
        out.writeStaticString(MessageLine.tail)
        return out
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
