import CompressNIO
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing
import WSBridgeCore

@testable import WSBridgeDaemon

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
