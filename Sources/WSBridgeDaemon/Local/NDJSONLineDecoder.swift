import NIOCore
import WSBridgeProtocol

/// One unit of client input: a line (without its newline), or notice that a line was too long.
enum LocalLine {
    case line(ByteBuffer)
    /// A line exceeded the limit; it is being discarded up to its newline.
    case tooLong(limit: Int)
}

/// A line passed `local.max_line`: the decoder's user inbound event (lines are read as
/// `ByteBuffer`s, which NIO passes without boxing them).
struct LineTooLong: Sendable {
    let limit: Int
}

/// Splits a client's byte stream into lines, with a length limit that never closes the
/// connection: an over-long line is reported once (`LineTooLong`) and skipped up to the next
/// newline. Each line is read on as a `ByteBuffer` (a `LocalLine` would be boxed in the `NIOAny`
/// and cast back out, ~2,000 instructions a line).
struct NDJSONLineDecoder: ByteToMessageDecoder {
    typealias InboundOut = ByteBuffer

    let maxLine: Int
    private var discarding = false
    /// Bytes of the current line already searched for a newline (avoids rescanning).
    private var scanned = 0

    init(maxLine: Int) {
        self.maxLine = maxLine
    }

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        // memchr: the line's bytes a word at a time (a collection search went a byte at a time
        // through the view's indexing, ~10 instructions a byte).
        let scanned = self.scanned
        let found = buffer.withUnsafeReadableBytes { $0.index(of: UInt8(ascii: "\n"), from: scanned) }
        guard let length = found else {
            if self.discarding {
                buffer.moveReaderIndex(to: buffer.writerIndex)
                self.scanned = 0
            } else if buffer.readableBytes > self.maxLine {
                self.discarding = true
                buffer.moveReaderIndex(to: buffer.writerIndex)
                self.scanned = 0
                context.fireUserInboundEventTriggered(LineTooLong(limit: self.maxLine))
            } else {
                self.scanned = buffer.readableBytes
            }
            return .needMoreData
        }
        self.scanned = 0
        if self.discarding {
            self.discarding = false
            buffer.moveReaderIndex(forwardBy: length + 1)
            return .continue
        }
        if length > self.maxLine {
            buffer.moveReaderIndex(forwardBy: length + 1)
            context.fireUserInboundEventTriggered(LineTooLong(limit: self.maxLine))
            return .continue
        }
        var line = buffer.readSlice(length: length)!
        buffer.moveReaderIndex(forwardBy: 1)
        if line.readableBytes > 0, line.getInteger(at: line.writerIndex - 1, as: UInt8.self) == UInt8(ascii: "\r") {
            line.moveWriterIndex(to: line.writerIndex - 1)
        }
        context.fireChannelRead(Self.wrapInboundOut(line))
        return .continue
    }

    mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        while try self.decode(context: context, buffer: &buffer) == .continue {}
        // A final line without its newline still counts.
        if !self.discarding, buffer.readableBytes > 0, buffer.readableBytes <= self.maxLine {
            let line = buffer.readSlice(length: buffer.readableBytes)!
            context.fireChannelRead(Self.wrapInboundOut(line))
        }
        buffer.moveReaderIndex(to: buffer.writerIndex)
        return .needMoreData
    }
}

/// The decoder's lines and `LineTooLong` events as `LocalLine`s, in their order: for a reader
/// that wants them in one type (the unit tests, the fuzzer).
final class LocalLines: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = LocalLine

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        context.fireChannelRead(Self.wrapInboundOut(.line(Self.unwrapInboundIn(data))))
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard let tooLong = event as? LineTooLong else { return context.fireUserInboundEventTriggered(event) }
        context.fireChannelRead(Self.wrapInboundOut(.tooLong(limit: tooLong.limit)))
    }
}

@available(*, unavailable)
extension LocalLines: Sendable {}
