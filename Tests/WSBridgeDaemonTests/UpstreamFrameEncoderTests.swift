import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing

@testable import WSBridgeDaemon

/// Our frame encoder writes what NIO's writes, byte for byte, in one buffer: every length class,
/// masked or not, RSV bits, a payload with room before its bytes or without, and one held
/// elsewhere too (the holder's bytes untouched).
@Suite struct UpstreamFrameEncoderTests {
    /// What `handler` writes for `frame`, all its writes joined.
    static func wire(_ frame: WebSocketFrame, ours: Bool) throws -> (bytes: [UInt8], writes: Int) {
        let channel = EmbeddedChannel()
        if ours {
            try channel.pipeline.syncOperations.addHandler(UpstreamFrameEncoder())
        } else {
            try channel.pipeline.syncOperations.addHandler(WebSocketFrameEncoder())
        }
        try channel.writeOutbound(frame)
        var bytes: [UInt8] = []
        var writes = 0
        while let out = try channel.readOutbound(as: ByteBuffer.self) {
            bytes += out.readableBytesView
            writes += 1
        }
        _ = try channel.finish()
        return (bytes, writes)
    }

    static func payload(_ count: Int, headroom: Int) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.reserveCapacity(headroom + count)
        buffer.moveWriterIndex(to: headroom)
        buffer.moveReaderIndex(to: headroom)
        for i in 0..<count { buffer.writeInteger(UInt8(truncatingIfNeeded: i &* 31 &+ 7)) }
        return buffer
    }

    @Test(arguments: [0, 1, 7, 8, 9, 100, 125, 126, 127, 1000, 65_535, 65_536, 70_001])
    func writesWhatNIOWritesInOneBuffer(length: Int) throws {
        let key: WebSocketMaskingKey = [0x12, 0xAB, 0x00, 0xFF]
        for (mask, headroom, rsv1, opcode) in [
            (key, 0, false, WebSocketOpcode.text), (key, 14, false, .binary), (nil, 0, true, .binary), (nil, 14, false, .text), (key, 14, true, .ping),
        ] {
            let frame = WebSocketFrame(fin: true, rsv1: rsv1, opcode: opcode, maskKey: mask, data: Self.payload(length, headroom: headroom))
            let theirs = try Self.wire(
                WebSocketFrame(fin: true, rsv1: rsv1, opcode: opcode, maskKey: mask, data: Self.payload(length, headroom: 0)), ours: false)
            let ours = try Self.wire(frame, ours: true)
            #expect(ours.bytes == theirs.bytes, "length \(length), mask \(mask != nil), headroom \(headroom)")
            #expect(ours.writes == 1)
        }
    }

    @Test func aPayloadHeldElsewhereIsCopiedNotMaskedWhereItIs() throws {
        let shared = Self.payload(300, headroom: 14)
        let before = Array(shared.readableBytesView)
        let ours = try Self.wire(WebSocketFrame(fin: true, opcode: .text, maskKey: [1, 2, 3, 4], data: shared), ours: true)
        #expect(Array(shared.readableBytesView) == before)
        let theirs = try Self.wire(WebSocketFrame(fin: true, opcode: .text, maskKey: [1, 2, 3, 4], data: Self.payload(300, headroom: 0)), ours: false)
        #expect(ours.bytes == theirs.bytes)
    }

    /// The link's sends between two flushes go out in one write (a frame each, masked, in
    /// order); a frame written through the pipeline, or a send with a promise, goes after
    /// what was sent before it.
    @Test func sendsBetweenFlushesAreOneWriteInOrder() throws {
        let channel = EmbeddedChannel()
        let encoder = UpstreamFrameEncoder()
        try channel.pipeline.syncOperations.addHandler(encoder)
        func frames(_ bytes: ByteBuffer) throws -> [String] {
            let decoder = EmbeddedChannel(handler: ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: 1 << 20)))
            try decoder.writeInbound(bytes)
            var out: [String] = []
            while let frame = try decoder.readInbound(as: WebSocketFrame.self) {
                #expect(frame.maskKey != nil)
                out.append("\(frame.opcode == .text ? "t" : "b"):\(String(buffer: frame.unmaskedData))")
            }
            _ = try decoder.finish()
            return out
        }
        func writes() throws -> [[String]] {
            var out: [[String]] = []
            while let bytes = try channel.readOutbound(as: ByteBuffer.self) { out.append(try frames(bytes)) }
            return out
        }
        encoder.send(text: true, ByteBuffer(string: "one"), promise: nil)
        encoder.send(text: false, ByteBuffer(string: String(repeating: "x", count: 300)), promise: nil)
        encoder.send(text: true, ByteBuffer(string: "three"), promise: nil)
        #expect(try writes().isEmpty, "held until the flush")
        channel.flush()
        #expect(try writes() == [["t:one", "b:" + String(repeating: "x", count: 300), "t:three"]])
        encoder.send(text: true, ByteBuffer(string: "four"), promise: nil)
        try channel.writeOutbound(WebSocketFrame(fin: true, opcode: .text, maskKey: [1, 2, 3, 4], data: ByteBuffer(string: "five")))
        encoder.send(text: true, ByteBuffer(string: "six"), promise: nil)
        let promise = channel.eventLoop.makePromise(of: Void.self)
        encoder.send(text: true, ByteBuffer(string: "seven"), promise: promise)
        channel.flush()
        #expect(try writes() == [["t:four"], ["t:five"], ["t:six"], ["t:seven"]])
        try promise.futureResult.wait()
        _ = try channel.finish()
    }
}
