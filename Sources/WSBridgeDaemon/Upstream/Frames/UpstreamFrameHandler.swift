import NIOCore
import NIOWebSocket
import WSBridgeCore

/// What an upstream broke, and the close code that says so (RFC 6455 §7.4.1).
struct UpstreamProtocolError: Error, CustomStringConvertible {
    var closeCode: WebSocketErrorCode
    var description: String

    static func violation(_ what: String) -> Self {
        Self(closeCode: .protocolError, description: "upstream violated the WebSocket protocol: \(what)")
    }

    static func tooLarge(_ limit: Int) -> Self {
        Self(closeCode: .messageTooLarge, description: "upstream sent a message larger than upstream.max_message_size (\(limit) bytes)")
    }

    static let invalidUTF8 = Self(closeCode: .dataInconsistentWithMessage, description: "upstream sent a text message that is not valid UTF-8")
}

/// The last handler of an upstream channel: reassembles messages from frames, inflates the
/// compressed ones (permessage-deflate, RFC 7692: RSV1 on a message's first frame), validates
/// (RSV bits, UTF-8 of text, size, close frames), and hands whole messages and control frames
/// to the link driver. The one place of the reassembly rules and of "no data after the
/// server's close" (RFC 6455 §5.5.1); `PerMessageDeflateEncoder` only compresses what goes out.
/// Confined to the channel's event loop.
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
        /// The channel became writable again (sends that waited can go now).
        var writable: () -> Void = {}
        /// A read from the socket has been handled (the messages it held were delivered).
        var readComplete: () -> Void = {}
    }

    private let callbacks: Callbacks
    private let maxMessageSize: Int
    /// The negotiated permessage-deflate contexts (nil: not negotiated; RSV1 is then an error).
    private let deflate: PerMessageDeflate?
    /// A `TextStreamValidator` in front checks uncompressed text as it arrives: not again here.
    private let textCheckedUpstream: Bool
    /// The message being reassembled: its kind, its bytes so far, and whether it is compressed.
    private var pending: (kind: UpstreamMessage.Kind, data: ByteBuffer, compressed: Bool)?
    /// UTF-8 state of the uncompressed text message being reassembled: bad bytes fail the
    /// fragment that carries them.
    private var utf8 = UTF8Validator()
    private var failed = false
    private var allocator = ByteBufferAllocator()
    /// After the server's close frame, data frames are ignored (RFC 6455 §5.5.1).
    private var closeReceived = false

    init(callbacks: Callbacks, maxMessageSize: Int, textCheckedUpstream: Bool = false, deflate: PerMessageDeflate? = nil) {
        self.callbacks = callbacks
        self.maxMessageSize = maxMessageSize
        self.textCheckedUpstream = textCheckedUpstream
        self.deflate = deflate
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !self.failed else { return }
        let frame = Self.unwrapInboundIn(data)
        do {
            try self.handle(frame)
        } catch {
            self.failed = true
            self.pending = nil
            self.callbacks.error(error)
        }
    }

    private func handle(_ frame: WebSocketFrame) throws {
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
            if self.closeReceived { return }
            let compressed = frame.rsv1
            if frame.fin {
                try self.deliver(kind, frame.unmaskedData, compressed: compressed, validated: self.textCheckedUpstream)
            } else {
                // A message's bytes so far, compressed or not, are bounded as they arrive.
                try self.checkSize(frame.length)
                let data = frame.unmaskedData
                if kind == .text && !compressed && !self.textCheckedUpstream {
                    self.utf8 = UTF8Validator()
                    try self.validate(data, complete: false)
                }
                self.pending = (kind, data, compressed)
            }
        case .continuation:
            if frame.rsv1 { throw UpstreamProtocolError.violation("RSV1 set on a continuation frame") }
            guard var pending = self.pending else {
                throw UpstreamProtocolError.violation("continuation frame without a message to continue")
            }
            self.pending = nil
            try self.checkSize(pending.data.readableBytes + frame.length)
            var more = frame.unmaskedData
            if pending.kind == .text && !pending.compressed && !self.textCheckedUpstream {
                try self.validate(more, complete: frame.fin)
            }
            pending.data.writeBuffer(&more)
            if frame.fin {
                try self.deliver(pending.kind, pending.data, compressed: pending.compressed, validated: true)
            } else {
                self.pending = pending
            }
        case .ping, .pong, .connectionClose:
            if frame.rsv1 { throw UpstreamProtocolError.violation("RSV1 set on a control frame") }
            if !frame.fin { throw UpstreamProtocolError.violation("fragmented control frame") }
            if frame.opcode == .connectionClose {
                try Self.validateClose(frame.unmaskedData)
                self.closeReceived = true
            }
            self.callbacks.control(frame)
        default:
            throw UpstreamProtocolError.violation("unknown opcode \(frame.opcode)")
        }
    }

    private func checkSize(_ size: Int) throws {
        if size > self.maxMessageSize { throw UpstreamProtocolError.tooLarge(self.maxMessageSize) }
    }

    /// `validated`: an uncompressed text message whose bytes were checked as they came. A
    /// compressed one is inflated (bounded by `upstream.max_message_size`) and checked whole.
    private func deliver(_ kind: UpstreamMessage.Kind, _ payload: ByteBuffer, compressed: Bool, validated: Bool) throws {
        var payload = payload
        if compressed, let deflate = self.deflate {
            do {
                payload = try deflate.decompress(payload, limit: self.maxMessageSize, allocator: self.allocator)
            } catch PerMessageDeflate.Failure.tooLarge {
                throw UpstreamProtocolError.tooLarge(self.maxMessageSize)
            } catch {
                throw UpstreamProtocolError(closeCode: .dataInconsistentWithMessage, description: "\(error)")
            }
        }
        try self.checkSize(payload.readableBytes)
        if kind == .text && (compressed || !validated) {
            self.utf8 = UTF8Validator()
            try self.validate(payload, complete: true)
        }
        self.callbacks.message(kind, payload)
    }

    /// Feeds a fragment of an uncompressed text message to the running UTF-8 check.
    private func validate(_ data: ByteBuffer, complete: Bool) throws {
        let ok = data.withUnsafeReadableBytes { self.utf8.feed($0) }
        guard ok, !complete || self.utf8.isComplete else {
            throw UpstreamProtocolError.invalidUTF8
        }
    }

    /// Close codes a peer may send: those NIO names (1000-1003, 1007-1011), the registered
    /// 1012-1014, and the application range (RFC 6455 §7.4.1, §7.4.2, the IANA registry).
    static func mayBeSent(_ code: WebSocketErrorCode) -> Bool {
        switch code {
        case .unknown(let raw): (1012...1014).contains(raw) || (3000...4999).contains(raw)
        default: true
        }
    }

    /// A close frame's body: empty, or a valid code and a UTF-8 reason (RFC 6455 §5.5.1, §7.1.5).
    static func validateClose(_ body: ByteBuffer) throws {
        var body = body
        guard body.readableBytes != 0 else { return }
        guard let code = body.readWebSocketErrorCode() else {
            throw UpstreamProtocolError.violation("a close frame with a 1-byte body (a close code takes 2)")
        }
        guard Self.mayBeSent(code) else {
            throw UpstreamProtocolError.violation("close code \(UInt16(webSocketErrorCode: code)) is not one a peer may send")
        }
        var utf8 = UTF8Validator()
        let ok = body.withUnsafeReadableBytes { utf8.feed($0) } && utf8.isComplete
        guard ok else {
            throw UpstreamProtocolError(closeCode: .dataInconsistentWithMessage, description: "upstream sent a close reason that is not valid UTF-8")
        }
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.allocator = context.channel.allocator
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.callbacks.error(error)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        self.callbacks.readComplete()
        context.fireChannelReadComplete()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { self.callbacks.writable() }
        context.fireChannelWritabilityChanged()
    }
}

@available(*, unavailable)
extension UpstreamFrameHandler: Sendable {}
