import NIOCore
import NIOWebSocket
import WSBridgeCore

/// What an upstream broke, and the close code that says so (RFC 6455 §7.4.1).
struct UpstreamProtocolError: Error, CustomStringConvertible {
    var closeCode: UInt16
    var description: String

    static func violation(_ what: String) -> Self {
        Self(closeCode: 1002, description: "upstream violated the WebSocket protocol: \(what)")
    }

    static func tooLarge(_ limit: Int) -> Self {
        Self(closeCode: 1009, description: "upstream sent a message larger than upstream.max_message_size (\(limit) bytes)")
    }
}

/// The last handler of an upstream channel: reassembles messages from frames, inflates
/// permessage-deflate, validates (RSV bits, UTF-8 of text, size), and hands whole messages and
/// control frames to the link driver. Confined to the channel's event loop.
final class UpstreamFrameHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    struct Callbacks {
        /// A whole data message (already inflated and validated).
        var message: (UpstreamMessage.Kind, ByteBuffer) -> Void
        /// A ping, pong or close frame.
        var control: (WebSocketFrame) -> Void
        /// A protocol error from the upstream or the channel; the handler ignores input after it.
        var error: (any Error) -> Void
    }

    private let callbacks: Callbacks
    private let maxMessageSize: Int
    let deflate: PerMessageDeflate?
    private var pending: (kind: UpstreamMessage.Kind, compressed: Bool, data: ByteBuffer)?
    private var failed = false

    init(callbacks: Callbacks, maxMessageSize: Int, deflate: PerMessageDeflate?) {
        self.callbacks = callbacks
        self.maxMessageSize = maxMessageSize
        self.deflate = deflate
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !self.failed else { return }
        let frame = Self.unwrapInboundIn(data)
        do {
            try self.handle(frame, allocator: context.channel.allocator)
        } catch {
            self.failed = true
            self.pending = nil
            self.callbacks.error(error)
        }
    }

    private func handle(_ frame: WebSocketFrame, allocator: ByteBufferAllocator) throws {
        if frame.rsv2 || frame.rsv3 {
            throw UpstreamProtocolError.violation("reserved bits RSV2/RSV3 set")
        }
        switch frame.opcode {
        case .text, .binary:
            if frame.rsv1 && self.deflate == nil {
                throw UpstreamProtocolError.violation("RSV1 set but permessage-deflate was not negotiated")
            }
            guard self.pending == nil else {
                throw UpstreamProtocolError.violation("a new message started before the previous one ended")
            }
            let kind: UpstreamMessage.Kind = frame.opcode == .text ? .text : .binary
            if frame.fin {
                try self.deliver(kind, compressed: frame.rsv1, frame.unmaskedData, allocator: allocator)
            } else {
                try self.checkSize(frame.length)
                self.pending = (kind, frame.rsv1, frame.unmaskedData)
            }
        case .continuation:
            if frame.rsv1 { throw UpstreamProtocolError.violation("RSV1 set on a continuation frame") }
            guard var pending = self.pending else {
                throw UpstreamProtocolError.violation("continuation frame without a message to continue")
            }
            self.pending = nil
            try self.checkSize(pending.data.readableBytes + frame.length)
            var more = frame.unmaskedData
            pending.data.writeBuffer(&more)
            if frame.fin {
                try self.deliver(pending.kind, compressed: pending.compressed, pending.data, allocator: allocator)
            } else {
                self.pending = pending
            }
        case .ping, .pong, .connectionClose:
            if frame.rsv1 { throw UpstreamProtocolError.violation("RSV1 set on a control frame") }
            if !frame.fin { throw UpstreamProtocolError.violation("fragmented control frame") }
            self.callbacks.control(frame)
        default:
            throw UpstreamProtocolError.violation("unknown opcode \(frame.opcode)")
        }
    }

    private func checkSize(_ size: Int) throws {
        if size > self.maxMessageSize { throw UpstreamProtocolError.tooLarge(self.maxMessageSize) }
    }

    private func deliver(_ kind: UpstreamMessage.Kind, compressed: Bool, _ data: ByteBuffer, allocator: ByteBufferAllocator) throws {
        var payload = data
        if compressed, let deflate = self.deflate {
            do {
                payload = try deflate.decompress(data, limit: self.maxMessageSize, allocator: allocator)
            } catch PerMessageDeflate.Failure.tooLarge {
                throw UpstreamProtocolError.tooLarge(self.maxMessageSize)
            } catch {
                throw UpstreamProtocolError(closeCode: 1007, description: "\(error)")
            }
        } else {
            try self.checkSize(payload.readableBytes)
        }
        if kind == .text {
            let valid = payload.withUnsafeReadableBytes { bytes in
                String(validating: bytes.bindMemory(to: UInt8.self), as: UTF8.self) != nil
            }
            guard valid else {
                throw UpstreamProtocolError(closeCode: 1007, description: "upstream sent a text message that is not valid UTF-8")
            }
        }
        self.callbacks.message(kind, payload)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.callbacks.error(error)
    }
}

@available(*, unavailable)
extension UpstreamFrameHandler: Sendable {}
