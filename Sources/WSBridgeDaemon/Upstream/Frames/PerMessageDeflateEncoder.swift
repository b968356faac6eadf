import NIOCore
import NIOWebSocket
import WSBridgeCore

/// permessage-deflate (RFC 7692) for what the link sends: each whole data frame is compressed
/// and marked with RSV1; control frames pass. Inbound, `UpstreamFrameHandler` reassembles and
/// inflates (the same `PerMessageDeflate` holds both directions' contexts). Confined to the
/// channel's event loop.
final class PerMessageDeflateEncoder: ChannelOutboundHandler {
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private let deflate: PerMessageDeflate

    init(deflate: PerMessageDeflate) {
        self.deflate = deflate
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let frame = Self.unwrapOutboundIn(data)
        // Whole data messages only: the link never fragments what it sends.
        guard frame.opcode == .text || frame.opcode == .binary, frame.fin, !frame.rsv1 else {
            return context.write(data, promise: promise)
        }
        do {
            // Outbound frames carry their data unmasked; the encoder masks it.
            let compressed = try self.deflate.compress(frame.data, allocator: context.channel.allocator)
            let out = WebSocketFrame(fin: true, rsv1: true, opcode: frame.opcode, maskKey: frame.maskKey, data: compressed)
            context.write(Self.wrapOutboundOut(out), promise: promise)
        } catch {
            // zlib failing to compress (out of memory) must not lose the message: send it as it is.
            context.write(data, promise: promise)
        }
    }
}

@available(*, unavailable)
extension PerMessageDeflateEncoder: Sendable {}
