import CompressNIO
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing
import WSBridgeCore

@testable import WSBridgeDaemon

@Suite struct PerMessageDeflateWindowTests {
    /// Inflates raw deflate data with a window of `bits`; nil when it needs a larger window.
    /// The output goes out 64 bytes at a time, so back-references must come from zlib's window
    /// (with one big output buffer zlib copies from the buffer and never checks the window).
    static func inflate(_ data: ByteBuffer, windowBits bits: Int32) -> String? {
        guard let inflater = try? ZlibDecompressor(algorithm: .deflate, windowSize: bits) else { return nil }
        var input = ByteBuffer(bytes: Array(data.readableBytesView) + [0x00, 0x00, 0xFF, 0xFF])
        var result: [UInt8] = []
        while true {
            var chunk = ByteBufferAllocator().buffer(capacity: 64)
            do {
                try inflater.inflate(from: &input, to: &chunk)
                result += chunk.readableBytesView
                break
            } catch let error as CompressNIOError where error == .bufferOverflow {
                result += chunk.readableBytesView
            } catch let error as CompressNIOError where error == .inputBufferOverflow {
                result += chunk.readableBytesView
                break
            } catch {
                return nil  // "invalid distance too far back": the window was too small
            }
        }
        return String(decoding: result, as: UTF8.self)
    }

    /// `count` pseudo-random lowercase letters (little to compress, repeatable).
    static func random(_ count: Int, seed: UInt32) -> String {
        var seed = seed
        return String(
            (0..<count).map { _ in
                seed = seed &* 1_103_515_245 &+ 12345
                return Character(UnicodeScalar(UInt8(97 + (seed >> 16) % 26)))
            }
        )
    }

    @Test func clientMaxWindowBits8ProducesWhatAn8BitWindowInflates() throws {
        // Repeats 200 bytes apart (an 8-bit window may use them) and 255 bytes apart (at the edge
        // of an 8-bit window): whatever zlib references, a 256-byte window must follow it.
        // Repeats 300 apart are out of reach: using them would break an 8-bit window.
        let text =
            String(repeating: Self.random(200, seed: 1), count: 6) + String(repeating: Self.random(255, seed: 2), count: 6)
            + String(repeating: Self.random(300, seed: 3), count: 6)
        var eight = DeflateParameters()
        eight.clientMaxWindowBits = 8
        let compressed = try PerMessageDeflate(parameters: eight).compress(ByteBuffer(string: text), allocator: ByteBufferAllocator())
        #expect(Self.inflate(compressed, windowBits: 8) == text)
        // It did compress (back-references were used), so the check above means something.
        #expect(compressed.readableBytes < text.utf8.count / 2, "\(compressed.readableBytes) of \(text.utf8.count)")
        // And the check can fail: a 15-bit window's output references 300 bytes back.
        let wide = try PerMessageDeflate(parameters: DeflateParameters()).compress(ByteBuffer(string: text), allocator: ByteBufferAllocator())
        #expect(Self.inflate(wide, windowBits: 8) != text)
    }
}
