import NIOCore
import NIOWebSocket

/// A frame as a server writes it (RFC 6455 5.2: FIN set, never masked), encoded once and
/// written as bytes: an upstream message's frame is the same for every WebSocket app, so the
/// fan-out encodes it once and each app's socket is handed the same buffer.
enum ServerFrame {
    /// Writes a whole frame of `payload` (its readable bytes) into `buffer`.
    static func write(_ opcode: WebSocketOpcode, _ payload: ByteBuffer, into buffer: inout ByteBuffer) {
        let count = payload.readableBytes
        buffer.writeInteger(0x80 | UInt8(webSocketOpcode: opcode))
        if count < 126 {
            buffer.writeInteger(UInt8(count))
        } else if count <= Int(UInt16.max) {
            buffer.writeInteger(UInt8(126))
            buffer.writeInteger(UInt16(count))
        } else {
            buffer.writeInteger(UInt8(127))
            buffer.writeInteger(UInt64(count))
        }
        buffer.writeImmutableBuffer(payload)
    }

    /// The opcode and payload of the whole frame in `frame` (one the face wrote: unmasked); nil
    /// for anything else.
    static func payload(of frame: ByteBuffer) -> (WebSocketOpcode, ByteBuffer)? {
        guard frame.readableBytes >= 2, let first = frame.getInteger(at: frame.readerIndex, as: UInt8.self),
            let second = frame.getInteger(at: frame.readerIndex + 1, as: UInt8.self), let opcode = WebSocketOpcode(encodedWebSocketOpcode: first & 0x0F)
        else { return nil }
        var header = 2
        var length = Int(second & 0x7F)
        if length == 126 {
            guard let n = frame.getInteger(at: frame.readerIndex + 2, as: UInt16.self) else { return nil }
            (header, length) = (4, Int(n))
        } else if length == 127 {
            guard let n = frame.getInteger(at: frame.readerIndex + 2, as: UInt64.self) else { return nil }
            (header, length) = (10, Int(n))
        }
        guard let payload = frame.getSlice(at: frame.readerIndex + header, length: length) else { return nil }
        return (opcode, payload)
    }

    /// One frame in a buffer of its own.
    static func frame(_ opcode: WebSocketOpcode, _ payload: ByteBuffer, allocator: ByteBufferAllocator) -> ByteBuffer {
        var buffer = allocator.buffer(capacity: payload.readableBytes + 10)
        Self.write(opcode, payload, into: &buffer)
        return buffer
    }

    /// A close frame: `code` and `reason`, the reason cut to the 123 bytes a control frame
    /// leaves it (at a character's start, so it stays UTF-8).
    static func close(code: UInt16, reason: String, allocator: ByteBufferAllocator) -> ByteBuffer {
        var payload = allocator.buffer(capacity: 125)
        payload.writeInteger(code)
        var bytes = Array(reason.utf8.prefix(123))
        while bytes.count < reason.utf8.count, let last = bytes.last, last & 0xC0 == 0x80 { bytes.removeLast() }
        if bytes.count < reason.utf8.count, let last = bytes.last, last >= 0xC0 { bytes.removeLast() }
        payload.writeBytes(bytes)
        return Self.frame(.connectionClose, payload, allocator: allocator)
    }
}
