import CompressNIO
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing
import WSBridgeCore

@testable import WSBridgeDaemon

/// The byte-stream UTF-8 check in front of NIO's frame decoder (Autobahn 6.4.3, 6.4.4).
@Suite struct TextStreamValidatorTests {
    final class Errors: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        var errors: [String] = []
        var bytes: [UInt8] = []
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            self.bytes += Array(Self.unwrapInboundIn(data).readableBytesView)
        }
        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            self.errors.append("\((error as? UpstreamProtocolError).map { UInt16(webSocketErrorCode: $0.closeCode) } ?? 0)")
        }
    }

    /// An unmasked frame as a server sends it.
    static func frame(_ opcode: UInt8, _ payload: [UInt8], fin: Bool = true) -> [UInt8] {
        var out: [UInt8] = [(fin ? 0x80 : 0) | opcode]
        if payload.count < 126 {
            out.append(UInt8(payload.count))
        } else {
            out += [126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        }
        return out + payload
    }

    static func channel() throws -> (EmbeddedChannel, Errors) {
        let sink = Errors()
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(TextStreamValidator())
        try channel.pipeline.syncOperations.addHandler(sink)
        return (channel, sink)
    }

    @Test func aBadByteInsideAFrameFailsBeforeTheFrameIsComplete() throws {
        let (channel, sink) = try Self.channel()
        let good = Self.frame(0x1, Array("fine".utf8))
        let bad = Self.frame(0x1, Array(String(repeating: "x", count: 200).utf8) + [0xED, 0xA0, 0x80] + Array("tail".utf8))
        // The good frame and the first 150 bytes of the bad one: all valid so far.
        try channel.writeInbound(ByteBuffer(bytes: good + bad.prefix(150)))
        #expect(sink.errors.isEmpty)
        // The surrogate arrives; the frame's end has not.
        try channel.writeInbound(ByteBuffer(bytes: bad[150..<210]))
        #expect(sink.errors == ["1007"])
        // The complete good frame went on; nothing after the failure does.
        #expect(Array(sink.bytes.prefix(good.count)) == good)
        let before = sink.bytes.count
        try channel.writeInbound(ByteBuffer(bytes: bad[210...]))
        #expect(sink.bytes.count == before)
    }

    @Test func aTextMessageEndingInsideACharacterFailsAtItsLastFrame() throws {
        let (channel, sink) = try Self.channel()
        let first = Self.frame(0x1, Array("ok".utf8) + [0xCE], fin: false)
        try channel.writeInbound(ByteBuffer(bytes: first))
        #expect(sink.errors.isEmpty)
        try channel.writeInbound(ByteBuffer(bytes: Self.frame(0x0, [])))
        #expect(sink.errors == ["1007"])
        #expect(sink.bytes == first)
    }

    @Test func validTextSplitAnywhereAndOtherFramesPassUnchanged() throws {
        let (channel, sink) = try Self.channel()
        let text = Array("κόσμε ".utf8) + Array(String(repeating: "y", count: 300).utf8)
        let stream =
            Self.frame(0x1, Array(text.prefix(7)), fin: false) + Self.frame(0x9, [1, 2])
            + Self.frame(0x0, Array(text.dropFirst(7))) + Self.frame(0x2, [0xFF, 0xFE, 0xED])
            + Self.frame(0x1 | 0x40, [0xFF, 0x00])  // compressed text: checked after inflating
        for byte in stream {
            try channel.writeInbound(ByteBuffer(bytes: [byte]))
        }
        #expect(sink.errors.isEmpty)
        #expect(sink.bytes == stream)
    }
}
