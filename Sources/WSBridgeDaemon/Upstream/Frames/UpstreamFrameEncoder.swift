import NIOCore
import NIOWebSocket

/// What the link sends, as WebSocket frames on the wire (RFC 6455 5.2), in place of NIO's
/// encoder: the header and the masked payload written once into one buffer, one write (NIO's
/// wrote the header apart when the payload had no room before it), the mask applied eight bytes
/// at a time (NIO's went a byte at a time: a 100-byte send paid ~2,300 instructions for it).
/// (The payload is never masked where it is: the `NIOAny` that brings the frame still holds
/// it.) NIO's upgrader puts its own encoder in the pipeline, which cannot be removed: this one
/// goes right after it (nearer the tail) and writes past it, through its context, so it never
/// sees a frame. Confined to the channel's event loop.
final class UpstreamFrameEncoder: ChannelOutboundHandler {
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = ByteBuffer

    /// NIO's encoder's context, when the pipeline has one: what is written through it goes on
    /// past it, toward the socket.
    private var past: ChannelHandlerContext?

    func handlerAdded(context: ChannelHandlerContext) {
        self.past = try? context.pipeline.syncOperations.context(handlerType: WebSocketFrameEncoder.self)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.past = nil
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let frame = Self.unwrapOutboundIn(data)
        var payload = frame.data
        if var extensionData = frame.extensionData {
            // (Nothing here sends extension data; kept whole should something.)
            extensionData.writeBuffer(&payload)
            payload = extensionData
        }
        let length = payload.readableBytes
        var first: UInt8 = frame.fin ? 0x80 : 0
        if frame.rsv1 { first |= 0x40 }
        if frame.rsv2 { first |= 0x20 }
        if frame.rsv3 { first |= 0x10 }
        first |= UInt8(webSocketOpcode: frame.opcode)
        let mask = frame.maskKey
        let header = 2 + (length > 65_535 ? 8 : length > 125 ? 2 : 0) + (mask == nil ? 0 : 4)
        var out = context.channel.allocator.buffer(capacity: header + length)
        out.moveWriterIndex(forwardBy: header)
        out.writeBuffer(&payload)
        out.moveReaderIndex(forwardBy: header)
        if let mask { out.withUnsafeMutableReadableBytes { Self.apply(mask, to: $0) } }
        Self.setHeader(first, length: length, mask: mask, in: &out, at: 0)
        out.moveReaderIndex(to: 0)
        (self.past ?? context).write(Self.wrapOutboundOut(out), promise: promise)
    }

    private static func setHeader(_ first: UInt8, length: Int, mask: WebSocketMaskingKey?, in buffer: inout ByteBuffer, at start: Int) {
        let maskBit: UInt8 = mask == nil ? 0 : 0x80
        var at = start
        at += buffer.setInteger(first, at: at)
        if length > 65_535 {
            at += buffer.setInteger(127 | maskBit, at: at)
            at += buffer.setInteger(UInt64(length), at: at)
        } else if length > 125 {
            at += buffer.setInteger(126 | maskBit, at: at)
            at += buffer.setInteger(UInt16(length), at: at)
        } else {
            at += buffer.setInteger(UInt8(length) | maskBit, at: at)
        }
        if let mask { buffer.setBytes(mask, at: at) }
    }

    /// XORs `bytes` with the key repeated (its first byte on the first byte), eight at a time.
    static func apply(_ key: WebSocketMaskingKey, to bytes: UnsafeMutableRawBufferPointer) {
        guard let base = bytes.baseAddress else { return }
        var word: UInt64 = 0
        withUnsafeMutableBytes(of: &word) { w in
            for i in 0..<8 { w[i] = key[i % 4] }
        }
        let count = bytes.count
        var i = 0
        while i + 8 <= count {
            let v = base.loadUnaligned(fromByteOffset: i, as: UInt64.self)
            base.storeBytes(of: v ^ word, toByteOffset: i, as: UInt64.self)
            i += 8
        }
        while i < count {
            bytes[i] ^= key[i % 4]
            i += 1
        }
    }
}

@available(*, unavailable)
extension UpstreamFrameEncoder: Sendable {}
