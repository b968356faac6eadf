import NIOCore
import NIOWebSocket
import WSBridgeCore

/// permessage-deflate (RFC 7692) for both directions of one link, between NIO's frame codec and
/// the `UpstreamFrameHandler`, so neither the frame handler nor the link knows about it:
///
/// - inbound, a compressed message (RSV1 on its first frame) is gathered from its fragments,
///   inflated (bounded by `upstream.max_message_size`), checked for UTF-8 when it is text, and
///   passed on as one uncompressed frame; uncompressed messages and control frames pass as
///   they are;
/// - outbound, each whole data frame is compressed and marked with RSV1; control frames pass.
///
/// A violation is passed on as an `UpstreamProtocolError` (with its close code) and input after
/// it is ignored. Confined to the channel's event loop.
final class PerMessageDeflateHandler: ChannelDuplexHandler {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = WebSocketFrame
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private let deflate: PerMessageDeflate
    private let maxMessageSize: Int
    /// The compressed message being gathered from its fragments.
    private var gathering: (opcode: WebSocketOpcode, data: ByteBuffer)?
    private var failed = false
    /// After the server's close frame, data frames are ignored (RFC 6455 §5.5.1), not inflated.
    private var closeReceived = false

    init(deflate: PerMessageDeflate, maxMessageSize: Int) {
        self.deflate = deflate
        self.maxMessageSize = maxMessageSize
    }

    var parameters: DeflateParameters { self.deflate.parameters }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !self.failed else { return }
        let frame = Self.unwrapInboundIn(data)
        switch frame.opcode {
        case .text, .binary:
            if self.closeReceived { return }
            guard self.gathering == nil else {
                return self.fail(.violation("a new message started before the previous one ended"), context)
            }
            guard frame.rsv1 else { return context.fireChannelRead(data) }
            if frame.fin {
                self.inflate(frame.opcode, frame.unmaskedData, context)
            } else {
                guard frame.length <= self.maxMessageSize else { return self.fail(.tooLarge(self.maxMessageSize), context) }
                self.gathering = (frame.opcode, frame.unmaskedData)
            }
        case .continuation:
            guard var message = self.gathering else { return context.fireChannelRead(data) }
            guard !frame.rsv1 else { return self.fail(.violation("RSV1 set on a continuation frame"), context) }
            guard message.data.readableBytes + frame.length <= self.maxMessageSize else {
                return self.fail(.tooLarge(self.maxMessageSize), context)
            }
            self.gathering = nil
            var more = frame.unmaskedData
            message.data.writeBuffer(&more)
            if frame.fin {
                self.inflate(message.opcode, message.data, context)
            } else {
                self.gathering = message
            }
        default:
            if frame.opcode == .connectionClose { self.closeReceived = true }
            context.fireChannelRead(data)
        }
    }

    private func inflate(_ opcode: WebSocketOpcode, _ data: ByteBuffer, _ context: ChannelHandlerContext) {
        let payload: ByteBuffer
        do {
            payload = try self.deflate.decompress(data, limit: self.maxMessageSize, allocator: context.channel.allocator)
        } catch PerMessageDeflate.Failure.tooLarge {
            return self.fail(.tooLarge(self.maxMessageSize), context)
        } catch {
            return self.fail(UpstreamProtocolError(closeCode: .dataInconsistentWithMessage, description: "\(error)"), context)
        }
        if opcode == .text {
            var utf8 = UTF8Validator()
            let valid = payload.withUnsafeReadableBytes { utf8.feed($0) } && utf8.isComplete
            guard valid else {
                return self.fail(.invalidUTF8, context)
            }
        }
        context.fireChannelRead(Self.wrapInboundOut(WebSocketFrame(fin: true, opcode: opcode, data: payload)))
    }

    private func fail(_ error: UpstreamProtocolError, _ context: ChannelHandlerContext) {
        self.failed = true
        self.gathering = nil
        context.fireErrorCaught(error)
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
extension PerMessageDeflateHandler: Sendable {}
