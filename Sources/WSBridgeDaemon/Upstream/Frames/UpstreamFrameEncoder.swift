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
    /// Its own context, for `send`.
    private var context: ChannelHandlerContext?

    func handlerAdded(context: ChannelHandlerContext) {
        self.past = try? context.pipeline.syncOperations.context(handlerType: WebSocketFrameEncoder.self)
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.past = nil
        self.context = nil
        self.pending = nil
    }

    /// Frames `send` wrote since the last flush, not yet handed to NIO: one write for all of
    /// them (NIO's bookkeeping per write costs more than building a small frame). Handed on at
    /// the flush, before anything else is written, or once it holds `batchBytes` (so that the
    /// channel's writability still tells a sender when to stop).
    private var pending: ByteBuffer?
    private static let batchBytes = 64 * 1024

    func flush(context: ChannelHandlerContext) {
        self.writePending()
        context.flush()
    }

    private func writePending() {
        guard let lines = self.pending, let context = self.context else { return }
        self.pending = nil
        (self.past ?? context).write(Self.wrapOutboundOut(lines), promise: nil)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        self.writePending()
        let frame = Self.unwrapOutboundIn(data)
        var payload = frame.data
        if var extensionData = frame.extensionData {
            // (Nothing here sends extension data; kept whole should something.)
            extensionData.writeBuffer(&payload)
            payload = extensionData
        }
        var first: UInt8 = frame.fin ? 0x80 : 0
        if frame.rsv1 { first |= 0x40 }
        if frame.rsv2 { first |= 0x20 }
        if frame.rsv3 { first |= 0x10 }
        first |= UInt8(webSocketOpcode: frame.opcode)
        var out = context.channel.allocator.buffer(capacity: Self.headerBytes(payload.readableBytes, masked: frame.maskKey != nil) + payload.readableBytes)
        Self.append(first, payload, mask: frame.maskKey, to: &out)
        (self.past ?? context).write(Self.wrapOutboundOut(out), promise: promise)
    }

    /// A data message as one final frame, masked with a fresh key, written from here toward the
    /// socket: what the link sends when no handler nearer the tail changes what is written (no
    /// permessage-deflate). The frame is built from the payload directly: no `WebSocketFrame`
    /// boxed in a `NIOAny` and taken out again, no walk down the pipeline (the link's sends
    /// cost a third less). In order with what goes through `write`: nothing between the tail
    /// and here holds a write back.
    func send(text: Bool, _ payload: ByteBuffer, promise: EventLoopPromise<Void>?) {
        guard let context = self.context else {
            promise?.fail(ChannelError.ioOnClosedChannel)
            return
        }
        let first: UInt8 = 0x80 | UInt8(webSocketOpcode: text ? .text : .binary)
        let size = Self.headerBytes(payload.readableBytes, masked: true) + payload.readableBytes
        guard promise == nil else {
            // Its own write, to tell its promise when it is done.
            self.writePending()
            var out = context.channel.allocator.buffer(capacity: size)
            Self.append(first, payload, mask: .random(), to: &out)
            (self.past ?? context).write(Self.wrapOutboundOut(out), promise: promise)
            return
        }
        if self.pending == nil { self.pending = context.channel.allocator.buffer(capacity: max(size, 4096)) }
        Self.append(first, payload, mask: .random(), to: &self.pending!)
        if self.pending!.readableBytes >= Self.batchBytes { self.writePending() }
    }

    private static func headerBytes(_ length: Int, masked: Bool) -> Int {
        2 + (length > 65_535 ? 8 : length > 125 ? 2 : 0) + (masked ? 4 : 0)
    }

    /// Appends the frame to `out`: its header, then the payload (masked with `mask`, if any).
    private static func append(_ first: UInt8, _ payload: ByteBuffer, mask: WebSocketMaskingKey?, to out: inout ByteBuffer) {
        var payload = payload
        let length = payload.readableBytes
        let start = out.writerIndex
        let header = Self.headerBytes(length, masked: mask != nil)
        out.moveWriterIndex(forwardBy: header)
        out.writeBuffer(&payload)
        if let mask {
            let at = start + header - out.readerIndex
            out.withUnsafeMutableReadableBytes { bytes in
                Self.apply(mask, to: UnsafeMutableRawBufferPointer(rebasing: bytes[at..<(at + length)]))
            }
        }
        Self.setHeader(first, length: length, mask: mask, in: &out, at: start)
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
