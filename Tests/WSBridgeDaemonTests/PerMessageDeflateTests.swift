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

/// The inbound half on the frame handler (reassembly, then inflation, then the checks), and
/// the outbound encoder.
@Suite struct PerMessageDeflateHandlerTests {
    static func channel(maxMessageSize: Int = 1 << 20) throws -> (EmbeddedChannel, UpstreamFrameHandlerTests.Recorder) {
        try UpstreamFrameHandlerTests.channel(deflate: try PerMessageDeflate(parameters: DeflateParameters()), maxMessageSize: maxMessageSize)
    }

    func compressed(_ text: String) throws -> ByteBuffer {
        try PerMessageDeflate(parameters: DeflateParameters()).compress(ByteBuffer(string: text), allocator: ByteBufferAllocator())
    }

    @Test func aFragmentedCompressedMessageIsInflatedAsOneMessageWithControlFramesBetween() throws {
        let (channel, r) = try Self.channel()
        var data = try self.compressed("Hello, κόσμε")
        let head = data.readSlice(length: 3)!
        try channel.writeInbound(WebSocketFrame(fin: false, rsv1: true, opcode: .text, data: head))
        try channel.writeInbound(WebSocketFrame(fin: true, opcode: .ping, data: ByteBuffer(string: "p")))
        try channel.writeInbound(WebSocketFrame(fin: true, opcode: .continuation, data: data))
        try channel.writeInbound(WebSocketFrame(fin: true, opcode: .binary, data: ByteBuffer(string: "plain")))
        #expect(r.events == ["control ping", "message text Hello, κόσμε", "message binary plain"])
    }

    @Test func outboundDataFramesAreCompressedAndControlFramesPass() throws {
        let channel = EmbeddedChannel(handler: PerMessageDeflateEncoder(deflate: try PerMessageDeflate(parameters: DeflateParameters())))
        let mask: WebSocketMaskingKey = .random()
        try channel.writeOutbound(WebSocketFrame(fin: true, opcode: .text, maskKey: mask, data: ByteBuffer(string: "hello hello hello hello")))
        try channel.writeOutbound(WebSocketFrame(fin: true, opcode: .ping, data: ByteBuffer(string: "x")))
        let sent = try #require(try channel.readOutbound(as: WebSocketFrame.self))
        #expect(sent.rsv1 && sent.opcode == .text && sent.maskKey == mask)
        let inflated = try PerMessageDeflate(parameters: DeflateParameters()).decompress(sent.data, limit: 1024, allocator: ByteBufferAllocator())
        #expect(String(buffer: inflated) == "hello hello hello hello")
        let ping = try #require(try channel.readOutbound(as: WebSocketFrame.self))
        #expect(ping.opcode == .ping && !ping.rsv1)
    }

    /// The close code of the first error the frames raise, if any.
    func error(after frames: [WebSocketFrame], maxMessageSize: Int = 1 << 20) throws -> UInt16? {
        let (channel, r) = try Self.channel(maxMessageSize: maxMessageSize)
        for frame in frames { try channel.writeInbound(frame) }
        return r.events.first { $0.hasPrefix("error ") }.flatMap { UInt16($0.split(separator: " ")[1]) }
    }

    @Test func violationsCarryTheirCloseCodes() throws {
        let text = try self.compressed("some text")
        // RSV1 on a continuation of a compressed message: 1002.
        var data = text
        let head = data.readSlice(length: 2)!
        let rsv1Continuation = try self.error(after: [
            WebSocketFrame(fin: false, rsv1: true, opcode: .text, data: head), WebSocketFrame(fin: true, rsv1: true, opcode: .continuation, data: data),
        ])
        #expect(rsv1Continuation == 1002)
        // Bigger than upstream.max_message_size once inflated: 1009.
        let big = try PerMessageDeflate(parameters: DeflateParameters()).compress(ByteBuffer(repeating: 0x41, count: 100_000), allocator: ByteBufferAllocator())
        #expect(try self.error(after: [WebSocketFrame(fin: true, rsv1: true, opcode: .binary, data: big)], maxMessageSize: 65536) == 1009)
        // Compressed text that is not UTF-8: 1007; corrupt deflate data: 1007.
        let latin1 = try PerMessageDeflate(parameters: DeflateParameters()).compress(
            ByteBuffer(bytes: [0x63, 0x61, 0x66, 0xE9]), allocator: ByteBufferAllocator())
        #expect(try self.error(after: [WebSocketFrame(fin: true, rsv1: true, opcode: .text, data: latin1)]) == 1007)
        #expect(try self.error(after: [WebSocketFrame(fin: true, rsv1: true, opcode: .text, data: ByteBuffer(bytes: [0xFF, 0xFF, 0xFF, 0x00]))]) == 1007)
        // The same bytes as binary are fine.
        #expect(try self.error(after: [WebSocketFrame(fin: true, rsv1: true, opcode: .binary, data: latin1)]) == nil)
    }

    @Test func dataAfterTheServersCloseIsNotInflated() throws {
        let (channel, r) = try Self.channel()
        try channel.writeInbound(WebSocketFrame(fin: true, opcode: .connectionClose, data: ByteBuffer(bytes: [0x03, 0xE8])))
        try channel.writeInbound(WebSocketFrame(fin: true, rsv1: true, opcode: .text, data: ByteBuffer(bytes: [0xFF, 0xFF])))
        #expect(r.events == ["control close"])
    }
}
