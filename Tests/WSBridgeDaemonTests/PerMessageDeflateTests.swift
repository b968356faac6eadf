import CompressNIO
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing
import WSBridgeCore

@testable import WSBridgeDaemon

/// permessage-deflate's contexts (RFC 7692) and the duplex handler that owns both directions.
@Suite struct PerMessageDeflateTests {
    let allocator = ByteBufferAllocator()

    @Test(arguments: [false, true])
    func messagesRoundTripWithAndWithoutContextTakeover(_ noTakeover: Bool) throws {
        var parameters = DeflateParameters()
        parameters.clientNoContextTakeover = noTakeover
        parameters.serverNoContextTakeover = noTakeover
        let sender = try PerMessageDeflate(parameters: parameters)
        let receiver = try PerMessageDeflate(parameters: parameters)
        let texts = ["{\"px\":1.5}", "{\"px\":1.5}", "", String(repeating: "κόσμε ", count: 5000), PerMessageDeflateWindowTests.random(70_000, seed: 9), ""]
        var sizes: [Int] = []
        for text in texts {
            let compressed = try sender.compress(ByteBuffer(string: text), allocator: self.allocator)
            sizes.append(compressed.readableBytes)
            #expect(String(buffer: try receiver.decompress(compressed, limit: 1 << 20, allocator: self.allocator)) == text)
        }
        // With context takeover, a repeat costs a few bytes; without, it is compressed afresh.
        #expect(noTakeover ? sizes[1] == sizes[0] : sizes[1] < sizes[0], "\(sizes)")
        // An empty message is the single byte 0x00 (RFC 7692 §7.2.3.6), never an empty payload.
        #expect(sizes[2] >= 1 && sizes[5] >= 1)
    }

    @Test func theInflatedSizeIsBounded() throws {
        let sender = try PerMessageDeflate(parameters: DeflateParameters())
        let receiver = try PerMessageDeflate(parameters: DeflateParameters())
        let bomb = try sender.compress(ByteBuffer(repeating: 0x41, count: 1 << 20), allocator: self.allocator)
        #expect(bomb.readableBytes < 2048)
        #expect(throws: PerMessageDeflate.Failure.self) { try receiver.decompress(bomb, limit: 64 * 1024, allocator: self.allocator) }
    }

    @Test func corruptDataIsRefused() throws {
        let receiver = try PerMessageDeflate(parameters: DeflateParameters())
        #expect(throws: PerMessageDeflate.Failure.self) {
            try receiver.decompress(ByteBuffer(bytes: [0xFF, 0xFF, 0xFF, 0x00]), limit: 1 << 20, allocator: self.allocator)
        }
    }

    @Test func aMessageEndingTheDeflateStreamIsFollowedByAFreshOne() throws {
        // A sender may end a message with a final block (BFINAL): the receiver starts anew.
        let final = try ZlibCompressor(algorithm: .deflate)
        var input = ByteBuffer(string: "the end")
        var first = self.allocator.buffer(capacity: 256)
        try final.deflate(from: &input, to: &first, flush: .finish)
        let receiver = try PerMessageDeflate(parameters: DeflateParameters())
        #expect(String(buffer: try receiver.decompress(first, limit: 1024, allocator: self.allocator)) == "the end")
        let next = try PerMessageDeflate(parameters: DeflateParameters()).compress(ByteBuffer(string: "and again"), allocator: self.allocator)
        #expect(String(buffer: try receiver.decompress(next, limit: 1024, allocator: self.allocator)) == "and again")
    }
}
