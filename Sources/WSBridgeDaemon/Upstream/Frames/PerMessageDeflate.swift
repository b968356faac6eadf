import CompressNIO
import NIOCore
import WSBridgeCore

/// The compression contexts of one link with permessage-deflate (RFC 7692): raw deflate through
/// CompressNIO's zlib streams. Confined to the link's event loop.
package final class PerMessageDeflate {
    package enum Failure: Error, CustomStringConvertible {
        case tooLarge(limit: Int)
        case corrupt(String)

        package var description: String {
            switch self {
            case .tooLarge(let limit):
                "upstream sent a compressed message larger than upstream.max_message_size (\(limit) bytes) once inflated"
            case .corrupt(let what):
                "upstream sent invalid permessage-deflate data (\(what)); if this repeats, set upstream.compression = false"
            }
        }
    }

    package let parameters: DeflateParameters
    private let inflater: ZlibDecompressor
    private let deflater: ZlibCompressor
    /// RFC 7692 §7.2.2: the receiver appends 00 00 FF FF to each message before inflating.
    /// One buffer, owned here (so zlib reads it in place), rewound for each message.
    private var tail: ByteBuffer
    /// The last message's inflated size: the next output buffer starts that big (messages on
    /// one link tend to be alike), so it is allocated once and not grown.
    private var lastInflated = 0

    package init(parameters: DeflateParameters) throws {
        self.parameters = parameters
        self.inflater = try ZlibDecompressor(algorithm: .deflate, windowSize: 15)
        self.tail = ByteBuffer(bytes: [0x00, 0x00, 0xFF, 0xFF])
        // zlib's raw deflate has no 8-bit window, so client_max_window_bits=8 compresses with 9.
        // That stays within what the server's 256-byte window can follow: zlib never emits a
        // distance beyond w_size - MIN_LOOKAHEAD = 512 - 262 = 250 bytes (a unit test checks it).
        self.deflater = try ZlibCompressor(
            algorithm: .deflate,
            configuration: ZlibConfiguration(windowSize: Int32(max(parameters.clientMaxWindowBits, 9)), compressionLevel: 6, memoryLevel: 8)
        )
    }

    /// Inflates one message, refusing to produce more than `limit` bytes.
    package func decompress(_ input: ByteBuffer, limit: Int, allocator: ByteBufferAllocator) throws -> ByteBuffer {
        var output = allocator.buffer(capacity: min(max(input.readableBytes * 4, self.lastInflated + 64, 256), limit + 1))
        var input = input
        if input.readableBytes > 0 { try self.inflate(&input, into: &output, limit: limit) }
        guard input.readableBytes == 0 else {
            throw Failure.corrupt("\(input.readableBytes) bytes after the final deflate block")
        }
        self.tail.moveReaderIndex(to: 0)
        try self.inflate(&self.tail, into: &output, limit: limit)
        // The tail is left unread only when the message ended the deflate stream (a final
        // block): the next message starts a new one.
        if self.tail.readableBytes > 0 || self.parameters.serverNoContextTakeover {
            try self.inflater.reset()
        }
        self.lastInflated = output.readableBytes
        return output
    }

    /// Feeds `input` until zlib has used all it can and written all it has, growing `output`.
    private func inflate(_ input: inout ByteBuffer, into output: inout ByteBuffer, limit: Int) throws {
        while true {
            if output.writableBytes < 512 {
                // Room for at least as much again (at least 4 KiB): large messages grow by doubling.
                output.reserveCapacity(minimumWritableBytes: min(max(output.readableBytes, 4096), 1 << 20))
            }
            do {
                try self.inflater.inflate(from: &input, to: &output)
                break
            } catch let error as CompressNIOError where error == .bufferOverflow {
                // The output is full: grow it and go on (bounded by the limit below).
            } catch let error as CompressNIOError where error == .inputBufferOverflow {
                break  // every byte used and nothing more to write
            } catch let error as CompressNIOError where error == .corruptData {
                throw Failure.corrupt("not a valid deflate stream")
            } catch {
                throw Failure.corrupt("\(error)")
            }
            if output.readableBytes > limit { throw Failure.tooLarge(limit: limit) }
        }
        if output.readableBytes > limit { throw Failure.tooLarge(limit: limit) }
    }

    /// Deflates one message (without the trailing 00 00 FF FF, as RFC 7692 §7.2.1 says).
    package func compress(_ input: ByteBuffer, allocator: ByteBufferAllocator) throws -> ByteBuffer {
        var input = input
        if input.readableBytes == 0 {
            // Never hand zlib a buffer without storage.
            input = allocator.buffer(capacity: 1)
        }
        // Sized for what JSON usually compresses to, grown only when zlib fills it: a buffer as
        // big as deflateBound would mostly stay empty while the frame waits to be written.
        var output = allocator.buffer(capacity: min(self.deflater.maxSize(from: input), max(input.readableBytes / 2 + 64, 256)))
        while true {
            do {
                try self.deflater.deflate(from: &input, to: &output, flush: .sync)
            } catch let error as CompressNIOError where error == .bufferOverflow && input.readableBytes == 0 {
                // No progress was possible: everything was already written (or an empty
                // message right after a sync flush, which writes nothing).
                break
            }
            // Done once zlib used all input and did not fill the output (nothing left pending).
            if input.readableBytes == 0 && output.writableBytes > 0 { break }
            output.reserveCapacity(minimumWritableBytes: max(output.capacity, 256))
        }
        if output.readableBytes >= 4 {
            output.moveWriterIndex(to: output.writerIndex - 4)
        } else if output.readableBytes == 0 {
            // An empty payload would make the peer's appended 00 00 FF FF a stored block of
            // 0xFF00 bytes that swallows the next message; RFC 7692 §7.2.3.6: an empty block is
            // the byte 0x00.
            output.writeInteger(UInt8(0))
        }
        if self.parameters.clientNoContextTakeover { try self.deflater.reset() }
        return output
    }
}

@available(*, unavailable)
extension PerMessageDeflate: Sendable {}
