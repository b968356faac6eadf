import NIOCore
import NIOWebSocket
import WSBridgeCore

/// What an upstream broke, and the close code that says so (RFC 6455 §7.4.1): every text is here.
enum UpstreamFrameError: Error, Equatable, CustomStringConvertible {
    /// A server must not mask its frames (§5.1).
    case maskedFrame
    case lengthTooLarge
    case reservedBits
    case compressedWithoutDeflate
    case messageInterrupted
    case compressedContinuation
    case continuationWithoutMessage
    case compressedControl
    case fragmentedControl
    case controlTooLong(Int)
    case unknownOpcode(UInt8)
    case closeCodeCut
    /// `reason`: the server's, which still says what it meant (NATS closes with 1006 "Stale Connection").
    case closeCodeNotAllowed(UInt16, reason: String?)
    case tooLarge(limit: Int)
    case invalidUTF8
    case closeReasonNotUTF8
    /// permessage-deflate could not inflate a message.
    case inflate(String)

    var closeCode: WebSocketErrorCode {
        switch self {
        case .tooLarge: .messageTooLarge
        case .invalidUTF8, .closeReasonNotUTF8, .inflate: .dataInconsistentWithMessage
        default: .protocolError
        }
    }

    var description: String {
        switch self {
        case .tooLarge(let limit): "upstream sent a message larger than upstream.max_message_size (\(limit) bytes)"
        case .invalidUTF8: "upstream sent a text message that is not valid UTF-8"
        case .closeReasonNotUTF8: "upstream sent a close reason that is not valid UTF-8"
        case .inflate(let problem): problem
        default: "upstream violated the WebSocket protocol: \(self.violation ?? "")"
        }
    }

    /// The rule broken, for the cases that break one (nil: the message's size or its text).
    private var violation: String? {
        switch self {
        case .maskedFrame: "a masked frame (a server must not mask its frames, RFC 6455 §5.1)"
        case .lengthTooLarge: "a frame length with its most significant bit set"
        case .reservedBits: "reserved bits RSV2/RSV3 set"
        case .compressedWithoutDeflate: "RSV1 set but permessage-deflate was not negotiated"
        case .messageInterrupted: "a new message started before the previous one ended"
        case .compressedContinuation: "RSV1 set on a continuation frame"
        case .continuationWithoutMessage: "continuation frame without a message to continue"
        case .compressedControl: "RSV1 set on a control frame"
        case .fragmentedControl: "fragmented control frame"
        case .controlTooLong(let length): "a control frame of \(length) bytes (at most 125, RFC 6455 §5.5)"
        case .unknownOpcode(let opcode): "unknown opcode \(opcode)"
        case .closeCodeCut: "a close frame with a 1-byte body (a close code takes 2)"
        case .closeCodeNotAllowed(let code, let reason):
            "close code \(code)\(reason.map { $0.isEmpty ? "" : ", reason \"\($0)\"" } ?? "") is not one a peer may send"
        case .tooLarge, .invalidUTF8, .closeReasonNotUTF8, .inflate: nil
        }
    }
}

/// The inbound side of an upstream channel after the upgrade, in one handler: it reads frames
/// straight from the socket's bytes (RFC 6455 §5.2), reassembles messages, inflates the
/// compressed ones (permessage-deflate, RFC 7692: RSV1 on a message's first frame), checks
/// them (RSV bits, opcodes, sizes, UTF-8 of text, close frames), and hands whole messages and
/// control frames to the link driver.
///
/// The message path costs little: a message that arrives in one frame within one read is
/// handed on as a slice of the read buffer (no copy, no allocation); UTF-8 is checked eight
/// ASCII bytes at a time; only a frame cut by a read's end is copied (into `partial`), and only
/// fragmented messages are copied together. Text is checked as its bytes arrive, inside frames
/// too, so a bad byte fails at once (Autobahn 6.4.3, 6.4.4: "fail fast"); compressed text is
/// checked once inflated. Server frames must not be masked (§5.1). Every bound is
/// `upstream.max_message_size`: a frame's declared length is checked from its header, before
/// its payload is read. The one place of the reassembly rules and of "no data after the
/// server's close" (§5.5.1); `PerMessageDeflateEncoder` only compresses what goes out.
/// Confined to the channel's event loop.
final class UpstreamFrameHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
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

    /// A frame's header (RFC 6455 §5.2).
    struct Header {
        var fin: Bool
        var rsv1: Bool
        var opcode: UInt8
        /// Bytes of the header itself: 2, 4 or 10.
        var size: Int
        /// Bytes of the payload.
        var length: Int

        var isControl: Bool { self.opcode & 0x08 != 0 }
    }

    private let callbacks: Callbacks
    private let maxMessageSize: Int
    /// The negotiated permessage-deflate contexts (nil: not negotiated; RSV1 is then an error).
    private let deflate: PerMessageDeflate?
    /// A frame cut by the end of a read: its bytes so far (header included). Its payload bytes
    /// have all been through the UTF-8 check (when it carries text).
    private var partial: ByteBuffer?
    /// The fragmented message being reassembled: its kind, its bytes so far, whether compressed.
    private var pending: (kind: UpstreamMessage.Kind, data: ByteBuffer, compressed: Bool)?
    /// An uncompressed text message is in progress: its frames' bytes go through `utf8`.
    private var checkingText = false
    private var utf8 = UTF8Validator()
    private var failed = false
    private var allocator = ByteBufferAllocator()
    /// After the server's close frame, the rest of the stream is ignored (RFC 6455 §5.5.1).
    private var closeReceived = false

    init(callbacks: Callbacks, maxMessageSize: Int, deflate: PerMessageDeflate? = nil) {
        self.callbacks = callbacks
        self.maxMessageSize = maxMessageSize
        self.deflate = deflate
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // After the server's close frame, nothing more is read (RFC 6455 §5.5.1).
        guard !self.failed, !self.closeReceived else { return }
        var input = Self.unwrapInboundIn(data)
        do {
            if self.partial != nil {
                guard try self.continuePartial(&input) else { return }
            }
            while input.readableBytes > 0, !self.closeReceived {
                guard let header = try Self.header(input.readableBytesView) else {
                    self.keepPartial(input)
                    return
                }
                try self.check(header)
                guard input.readableBytes >= header.size + header.length else {
                    // Text is checked as far as it came: a bad byte fails now.
                    try self.checkText(header, input.getSlice(at: input.readerIndex + header.size, length: input.readableBytes - header.size)!)
                    self.keepPartial(input)
                    return
                }
                input.moveReaderIndex(forwardBy: header.size)
                let payload = input.readSlice(length: header.length)!
                try self.handle(header, payload, checked: 0)
            }
        } catch {
            self.fail(error)
        }
    }

    /// Keeps the incomplete frame at the end of a read, in a buffer of its own. It grows with
    /// the bytes that come (not sized from the header: a header alone reserves nothing), up to
    /// the frame's length, which `check` bounds by `upstream.max_message_size`.
    private func keepPartial(_ input: ByteBuffer) {
        var copy = self.allocator.buffer(capacity: input.readableBytes)
        copy.writeImmutableBuffer(input)
        self.partial = copy
    }

    /// Adds the read's first bytes to the frame in `partial`. True when that frame is complete
    /// (and handled), with `input` left at the next frame.
    private func continuePartial(_ input: inout ByteBuffer) throws -> Bool {
        var partial = self.partial!
        self.partial = nil
        var header = try Self.header(partial.readableBytesView)
        // The header itself was cut: its bytes one at a time (at most 13), then its rules.
        while header == nil, let byte = input.readInteger(as: UInt8.self) {
            partial.writeInteger(byte)
            header = try Self.header(partial.readableBytesView)
            if let header { try self.check(header) }
        }
        guard let frame = header else {
            self.partial = partial
            return false
        }
        // The payload bytes already kept have been checked; those from this read have not.
        let checked = partial.readableBytes - frame.size
        var more = input.readSlice(length: min(frame.size + frame.length - partial.readableBytes, input.readableBytes))!
        partial.writeBuffer(&more)
        let payload = partial.getSlice(at: partial.readerIndex + frame.size, length: partial.readableBytes - frame.size)!
        guard payload.readableBytes == frame.length else {
            // Still not whole: check the text that came, and wait for more.
            try self.checkText(frame, payload, from: checked)
            self.partial = partial
            return false
        }
        try self.handle(frame, payload, checked: checked)
        return true
    }

    /// A frame's header, once all its bytes are in `bytes`; nil before.
    static func header(_ bytes: ByteBufferView) throws -> Header? {
        guard bytes.count >= 2 else { return nil }
        let start = bytes.startIndex
        let first = bytes[start]
        let second = bytes[start + 1]
        guard second & 0x80 == 0 else {
            throw UpstreamFrameError.maskedFrame
        }
        var size = 2
        var length = Int(second & 0x7F)
        if length >= 126 {
            let extra = length == 126 ? 2 : 8
            guard bytes.count >= 2 + extra else { return nil }
            var value: UInt64 = 0
            for i in 0..<extra { value = value << 8 | UInt64(bytes[start + 2 + i]) }
            if value > UInt64(Int.max) {
                throw UpstreamFrameError.lengthTooLarge
            }
            size += extra
            length = Int(value)
        }
        if first & 0x30 != 0 { throw UpstreamFrameError.reservedBits }
        return Header(fin: first & 0x80 != 0, rsv1: first & 0x40 != 0, opcode: first & 0x0F, size: size, length: length)
    }

    /// The rules a frame's header can be held to before its payload is read.
    private func check(_ header: Header) throws {
        switch header.opcode {
        case 0x1, 0x2:
            if header.rsv1 && self.deflate == nil {
                throw UpstreamFrameError.compressedWithoutDeflate
            }
            guard self.pending == nil else {
                throw UpstreamFrameError.messageInterrupted
            }
            try self.checkSize(header.length)
            self.checkingText = header.opcode == 0x1 && !header.rsv1
            if self.checkingText { self.utf8 = UTF8Validator() }
        case 0x0:
            if header.rsv1 { throw UpstreamFrameError.compressedContinuation }
            guard let pending = self.pending else {
                throw UpstreamFrameError.continuationWithoutMessage
            }
            try self.checkSize(pending.data.readableBytes + header.length)
        case 0x8, 0x9, 0xA:
            if header.rsv1 { throw UpstreamFrameError.compressedControl }
            if !header.fin { throw UpstreamFrameError.fragmentedControl }
            if header.length > 125 {
                throw UpstreamFrameError.controlTooLong(header.length)
            }
        default:
            throw UpstreamFrameError.unknownOpcode(header.opcode)
        }
    }

    /// Feeds the text payload bytes after `from` to the UTF-8 check (when the frame belongs to
    /// an uncompressed text message).
    private func checkText(_ header: Header, _ payload: ByteBuffer, from: Int = 0) throws {
        guard !header.isControl, self.checkingText, payload.readableBytes > from else { return }
        let ok = payload.withUnsafeReadableBytes { self.utf8.feed(UnsafeRawBufferPointer(rebasing: $0[from...])) }
        guard ok else { throw UpstreamFrameError.invalidUTF8 }
    }

    /// A whole frame; `checked`: its leading payload bytes the UTF-8 check has seen already.
    private func handle(_ header: Header, _ payload: ByteBuffer, checked: Int) throws {
        if header.isControl {
            if header.opcode == 0x8 {
                try Self.validateClose(payload)
                self.closeReceived = true
                self.pending = nil
            }
            let opcode: WebSocketOpcode = header.opcode == 0x8 ? .connectionClose : header.opcode == 0x9 ? .ping : .pong
            self.callbacks.control(WebSocketFrame(fin: true, opcode: opcode, data: payload))
            return
        }
        try self.checkText(header, payload, from: checked)
        if header.fin && self.checkingText && !self.utf8.isComplete { throw UpstreamFrameError.invalidUTF8 }
        if header.opcode != 0x0 {
            let kind: UpstreamMessage.Kind = header.opcode == 0x1 ? .text : .binary
            if header.fin {
                try self.deliver(kind, payload, compressed: header.rsv1)
            } else {
                var data = self.allocator.buffer(capacity: payload.readableBytes)
                data.writeImmutableBuffer(payload)
                self.pending = (kind, data, header.rsv1)
            }
            return
        }
        var pending = self.pending!
        self.pending = nil
        pending.data.writeImmutableBuffer(payload)
        if header.fin {
            try self.deliver(pending.kind, pending.data, compressed: pending.compressed)
        } else {
            self.pending = pending
        }
    }

    private func checkSize(_ size: Int) throws {
        if size > self.maxMessageSize { throw UpstreamFrameError.tooLarge(limit: self.maxMessageSize) }
    }

    /// Uncompressed text was checked as it came. A compressed message is inflated (bounded by
    /// `upstream.max_message_size`), and checked whole if it is text.
    private func deliver(_ kind: UpstreamMessage.Kind, _ payload: ByteBuffer, compressed: Bool) throws {
        self.checkingText = false
        guard compressed, let deflate = self.deflate else {
            self.callbacks.message(kind, payload)
            return
        }
        let inflated: ByteBuffer
        do {
            inflated = try deflate.decompress(payload, limit: self.maxMessageSize, allocator: self.allocator)
        } catch PerMessageDeflate.Failure.tooLarge {
            throw UpstreamFrameError.tooLarge(limit: self.maxMessageSize)
        } catch {
            throw UpstreamFrameError.inflate("\(error)")
        }
        try self.checkSize(inflated.readableBytes)
        if kind == .text {
            var utf8 = UTF8Validator()
            let ok = inflated.withUnsafeReadableBytes { utf8.feed($0) } && utf8.isComplete
            guard ok else { throw UpstreamFrameError.invalidUTF8 }
        }
        self.callbacks.message(kind, inflated)
    }

    private func fail(_ error: any Error) {
        self.failed = true
        self.pending = nil
        self.partial = nil
        self.callbacks.error(error)
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
            throw UpstreamFrameError.closeCodeCut
        }
        guard Self.mayBeSent(code) else {
            throw UpstreamFrameError.closeCodeNotAllowed(
                UInt16(webSocketErrorCode: code), reason: body.readString(length: min(body.readableBytes, 123)))
        }
        var utf8 = UTF8Validator()
        let ok = body.withUnsafeReadableBytes { utf8.feed($0) } && utf8.isComplete
        guard ok else {
            throw UpstreamFrameError.closeReasonNotUTF8
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
