import NIOCore
import WSBridgeCore

/// Checks the UTF-8 of uncompressed text messages as their bytes arrive, inside frames too.
///
/// NIO's `WebSocketFrameDecoder` hands over whole frames only, so without this a bad byte in a
/// frame that arrives in pieces is found only once the whole frame is in (Autobahn 6.4.3,
/// 6.4.4: "fail fast"). This handler sits in front of the decoder, follows the frame headers of
/// the byte stream (RFC 6455 §5.2), and feeds text payload bytes to a `UTF8Validator`. At the
/// first bad byte (or a text message that ends inside a character) it passes on the complete
/// frames before it, reports a 1007 error and drops the rest. With it in the pipeline the frame
/// handler does not check uncompressed text again; compressed text is checked once inflated.
/// Confined to the channel's event loop.
final class TextStreamValidator: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private var header: [UInt8] = []
    /// Payload bytes of the current frame not seen yet (nil while reading a header).
    private var remaining: UInt64?
    private var validating = false
    /// The current frame ends a text message that is being checked: at its end, no character
    /// may be left open.
    private var endsText = false
    /// An uncompressed text message is in progress (its continuations are checked too).
    private var inText = false
    private var utf8 = UTF8Validator()
    private var failed = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !self.failed else { return }
        var buffer = Self.unwrapInboundIn(data)
        let start = buffer.readerIndex
        // Where the frame being read began, within this buffer (start if it began earlier).
        var frameStart = start
        while buffer.readableBytes > 0 {
            if let remaining = self.remaining {
                let n = Int(min(remaining, UInt64(buffer.readableBytes)))
                if self.validating {
                    let ok = buffer.withUnsafeReadableBytes { self.utf8.feed(UnsafeRawBufferPointer(rebasing: $0.prefix(n))) }
                    if !ok {
                        self.fail(context, buffer: buffer, start: start, frameStart: frameStart)
                        return
                    }
                }
                buffer.moveReaderIndex(forwardBy: n)
                let left = remaining - UInt64(n)
                self.remaining = left == 0 ? nil : left
                if left == 0 {
                    guard self.frameEnded() else {
                        self.fail(context, buffer: buffer, start: start, frameStart: frameStart)
                        return
                    }
                    frameStart = buffer.readerIndex
                }
            } else {
                self.header.append(buffer.readInteger(as: UInt8.self)!)
                if let length = self.headerComplete() {
                    self.header.removeAll(keepingCapacity: true)
                    self.remaining = length == 0 ? nil : length
                    if length == 0 {
                        guard self.frameEnded() else {
                            self.fail(context, buffer: buffer, start: start, frameStart: frameStart)
                            return
                        }
                        frameStart = buffer.readerIndex
                    }
                }
            }
        }
        buffer.moveReaderIndex(to: start)
        context.fireChannelRead(Self.wrapInboundOut(buffer))
    }

    /// Once `header` holds a whole frame header: sets up the payload check, returns its length.
    private func headerComplete() -> UInt64? {
        guard self.header.count >= 2 else { return nil }
        let masked = self.header[1] & 0x80 != 0
        let short = self.header[1] & 0x7F
        let lengthBytes = short == 126 ? 2 : short == 127 ? 8 : 0
        let size = 2 + lengthBytes + (masked ? 4 : 0)
        guard self.header.count == size else { return nil }
        var length = UInt64(short)
        if lengthBytes > 0 {
            length = self.header[2..<(2 + lengthBytes)].reduce(0) { $0 << 8 | UInt64($1) }
        }
        let fin = self.header[0] & 0x80 != 0
        let rsv1 = self.header[0] & 0x40 != 0
        switch self.header[0] & 0x0F {
        case 0x1:  // text: a new message; compressed text is checked after inflating
            self.inText = !rsv1 && !masked
            self.utf8 = UTF8Validator()
            self.validating = self.inText
            self.endsText = fin && self.validating
            if fin { self.inText = false }
        case 0x0:  // continuation
            self.validating = self.inText && !masked
            self.endsText = fin && self.validating
            if fin { self.inText = false }
        case 0x2:
            self.inText = false
            self.validating = false
        default:  // control frames (and anything the decoder will refuse)
            self.validating = false
        }
        return length
    }

    /// A frame's payload is all in: false when it ended a text message inside a character.
    private func frameEnded() -> Bool {
        defer { self.endsText = false }
        return !self.endsText || self.utf8.isComplete
    }

    private func fail(_ context: ChannelHandlerContext, buffer: ByteBuffer, start: Int, frameStart: Int) {
        self.failed = true
        // The frames that ended before the bad one still count.
        if frameStart > start, let complete = buffer.getSlice(at: start, length: frameStart - start) {
            context.fireChannelRead(Self.wrapInboundOut(complete))
        }
        context.fireErrorCaught(
            UpstreamProtocolError.invalidUTF8
        )
    }
}

@available(*, unavailable)
extension TextStreamValidator: Sendable {}
