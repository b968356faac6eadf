import CWSBridgeZlib
import NIOCore
import WSBridgeCore

/// The compression contexts of one link with permessage-deflate (RFC 7692). Loop-confined.
final class PerMessageDeflate {
    enum Failure: Error, CustomStringConvertible {
        case tooLarge(limit: Int)
        case corrupt(Int32)
        case noMemory

        var description: String {
            switch self {
            case .tooLarge(let limit):
                "upstream sent a compressed message larger than upstream.max_message_size (\(limit) bytes) once inflated"
            case .corrupt(let code):
                "upstream sent invalid permessage-deflate data (zlib error \(code)); if this repeats, set upstream.compression = false"
            case .noMemory:
                "out of memory for permessage-deflate"
            }
        }
    }

    let parameters: DeflateParameters
    private let inflater: OpaquePointer
    private let deflater: OpaquePointer
    private static let tail: [UInt8] = [0x00, 0x00, 0xFF, 0xFF]

    init(parameters: DeflateParameters) throws {
        self.parameters = parameters
        // zlib's raw deflate has no 8-bit window, so client_max_window_bits=8 compresses with 9.
        // That stays within what the server's 256-byte window can follow: zlib never emits a
        // distance beyond w_size - MIN_LOOKAHEAD = 512 - 262 = 250 bytes (a unit test checks it).
        guard let inflater = cwsb_inflater_new(15) else { throw Failure.noMemory }
        guard let deflater = cwsb_deflater_new(Int32(max(parameters.clientMaxWindowBits, 9)), 6) else {
            cwsb_zstream_free(inflater)
            throw Failure.noMemory
        }
        self.inflater = inflater
        self.deflater = deflater
    }

    deinit {
        cwsb_zstream_free(self.inflater)
        cwsb_zstream_free(self.deflater)
    }

    /// Inflates one message, refusing to produce more than `limit` bytes.
    func decompress(_ input: ByteBuffer, limit: Int, allocator: ByteBufferAllocator) throws -> ByteBuffer {
        var output = allocator.buffer(capacity: min(max(input.readableBytes * 4, 256), limit + 1))
        var ended = try input.withUnsafeReadableBytes { bytes in
            try Self.run(self.inflater, bytes, into: &output, limit: limit)
        }
        if !ended {
            ended = try Self.tail.withUnsafeBytes { bytes in
                try Self.run(self.inflater, bytes, into: &output, limit: limit)
            }
        }
        if ended || self.parameters.serverNoContextTakeover { cwsb_zstream_reset(self.inflater) }
        return output
    }

    /// Deflates one message (without the trailing 00 00 FF FF, as RFC 7692 §7.2.1 says).
    func compress(_ input: ByteBuffer, allocator: ByteBufferAllocator) throws -> ByteBuffer {
        var output = allocator.buffer(capacity: input.readableBytes / 2 + 64)
        _ = try input.withUnsafeReadableBytes { bytes in
            try Self.run(self.deflater, bytes, into: &output, limit: Int.max)
        }
        if output.readableBytes >= 4 {
            output.moveWriterIndex(to: output.writerIndex - 4)
        } else if output.readableBytes == 0 {
            // zlib had nothing to flush (an empty message right after a sync flush). An empty
            // payload would make the peer's appended 00 00 FF FF a stored block of 0xFF00 bytes
            // that swallows the next message; RFC 7692 §7.2.3.6: an empty block is the byte 0x00.
            output.writeInteger(UInt8(0))
        }
        if self.parameters.clientNoContextTakeover { cwsb_zstream_reset(self.deflater) }
        return output
    }

    /// Feeds all of `input` with sync flushes until zlib has nothing more to write.
    /// Returns true when the deflate stream ended (a final block).
    private static func run(_ stream: OpaquePointer, _ input: UnsafeRawBufferPointer, into output: inout ByteBuffer, limit: Int) throws -> Bool {
        var offset = 0
        while true {
            output.reserveCapacity(minimumWritableBytes: 4096)
            let available = output.writableBytes
            var consumed = 0
            var produced = 0
            var status: Int32 = 0
            output.writeWithUnsafeMutableBytes(minimumWritableBytes: 0) { out in
                let next = input.baseAddress.map { $0.assumingMemoryBound(to: UInt8.self) + offset }
                status = cwsb_zstream_process(
                    stream,
                    next,
                    input.count - offset,
                    out.baseAddress!.assumingMemoryBound(to: UInt8.self),
                    out.count,
                    &consumed,
                    &produced
                )
                return produced
            }
            if status < 0 { throw Failure.corrupt(status) }
            offset += consumed
            if output.readableBytes > limit { throw Failure.tooLarge(limit: limit) }
            if status == 1 { return true }
            // Everything is flushed once the input is used up and zlib left output room.
            if offset >= input.count && (produced < available || status == 2) { return false }
            if consumed == 0 && produced == 0 { throw Failure.corrupt(-5) }
        }
    }
}
