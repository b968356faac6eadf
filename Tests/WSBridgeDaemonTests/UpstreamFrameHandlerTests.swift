import CompressNIO
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing
import WSBridgeCore

@testable import WSBridgeDaemon

/// The frame handler's rules on an EmbeddedChannel: reassembly, UTF-8, RSV bits, close frames.
@Suite struct UpstreamFrameHandlerTests {
    /// What the handler handed on, as lines: `message text|binary PAYLOAD`, `control OPCODE`,
    /// `error CODE DESCRIPTION`.
    final class Recorder {
        var events: [String] = []
    }

    static func channel(deflate: PerMessageDeflate? = nil, maxMessageSize: Int = 1 << 20) throws -> (EmbeddedChannel, Recorder) {
        let recorder = Recorder()
        let handler = UpstreamFrameHandler(
            callbacks: .init(
                message: { kind, data in recorder.events.append("message \(kind == .text ? "text" : "binary") \(String(buffer: data))") },
                control: { frame in
                    recorder.events.append(frame.opcode == .connectionClose ? "control close" : frame.opcode == .ping ? "control ping" : "control other")
                },
                error: { error in
                    let e = error as? UpstreamProtocolError
                    recorder.events.append("error \(e.map { UInt16(webSocketErrorCode: $0.closeCode) } ?? 0) \(error)")
                }
            ),
            maxMessageSize: maxMessageSize,
            deflate: deflate
        )
        let channel = EmbeddedChannel(handler: handler)
        return (channel, recorder)
    }

    static func frame(_ opcode: WebSocketOpcode, _ bytes: [UInt8], fin: Bool = true, rsv1: Bool = false, rsv2: Bool = false) -> WebSocketFrame {
        WebSocketFrame(fin: fin, rsv1: rsv1, rsv2: rsv2, opcode: opcode, data: ByteBuffer(bytes: bytes))
    }

    static func close(_ code: UInt16?, _ reason: [UInt8] = []) -> WebSocketFrame {
        var data = ByteBuffer()
        if let code { data.writeInteger(code) }
        data.writeBytes(reason)
        return WebSocketFrame(fin: true, opcode: .connectionClose, data: data)
    }

    @Test func fragmentsAreReassembledWithControlFramesBetween() throws {
        let (channel, r) = try Self.channel()
        try channel.writeInbound(Self.frame(.text, Array("Hel".utf8), fin: false))
        try channel.writeInbound(Self.frame(.ping, [1]))
        try channel.writeInbound(Self.frame(.continuation, Array("lo ".utf8), fin: false))
        try channel.writeInbound(Self.frame(.continuation, Array("κόσμε".utf8)))
        #expect(r.events == ["control ping", "message text Hello κόσμε"])
    }

    @Test func invalidUTF8FailsAtTheFragmentThatCarriesIt() throws {
        let (channel, r) = try Self.channel()
        try channel.writeInbound(Self.frame(.text, [0xCE, 0xBA, 0xE1], fin: false))  // split, still fine
        #expect(r.events.isEmpty)
        try channel.writeInbound(Self.frame(.continuation, [0xBD, 0xB9, 0xED, 0xA0], fin: false))  // a surrogate
        #expect(r.events.count == 1)
        #expect(r.events.first?.hasPrefix("error 1007 ") == true, "\(r.events)")
        // Input after the failure is ignored.
        try channel.writeInbound(Self.frame(.continuation, Array("x".utf8)))
        #expect(r.events.count == 1)
    }

    @Test func aTextMessageEndingInsideACharacterIs1007() throws {
        let (channel, r) = try Self.channel()
        try channel.writeInbound(Self.frame(.text, [0x41, 0xCE], fin: false))
        try channel.writeInbound(Self.frame(.continuation, []))
        #expect(r.events.first?.hasPrefix("error 1007 ") == true, "\(r.events)")
    }

    @Test(
        arguments: [
            (frame(.text, [0x41], rsv2: true), "RSV2/RSV3"),
            (frame(.text, [0x41], rsv1: true), "RSV1 set but permessage-deflate was not negotiated"),
            (frame(.continuation, [0x41]), "continuation frame without a message"),
            (frame(.ping, [1], fin: false), "fragmented control frame"),
            (close(nil, [0x03]), "1-byte body"),
        ] as [(WebSocketFrame, String)])
    func protocolViolationsAre1002(_ frame: WebSocketFrame, _ mentions: String) throws {
        let (channel, r) = try Self.channel()
        var frame = frame
        if frame.opcode == .connectionClose, frame.data.readableBytes == 1 {
            frame = WebSocketFrame(fin: true, opcode: .connectionClose, data: ByteBuffer(bytes: [0x03]))
        }
        try channel.writeInbound(frame)
        #expect(r.events.count == 1)
        #expect(r.events.first?.hasPrefix("error 1002 ") == true, "\(r.events)")
        #expect(r.events.first?.contains(mentions) == true, "\(r.events)")
    }

    @Test(arguments: [0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000] as [UInt16])
    func invalidCloseCodesAre1002(_ code: UInt16) throws {
        let (channel, r) = try Self.channel()
        try channel.writeInbound(Self.close(code))
        #expect(r.events.first?.hasPrefix("error 1002 ") == true, "\(code): \(r.events)")
    }

    @Test(arguments: [1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 3999, 4000, 4999] as [UInt16])
    func validCloseCodesAreHandedOn(_ code: UInt16) throws {
        let (channel, r) = try Self.channel()
        try channel.writeInbound(Self.close(code, Array("bye".utf8)))
        #expect(r.events == ["control close"])
    }

    @Test func anEmptyCloseIsValidAndAnInvalidUTF8ReasonIs1007() throws {
        let (empty, e) = try Self.channel()
        try empty.writeInbound(Self.close(nil))
        #expect(e.events == ["control close"])
        let (bad, b) = try Self.channel()
        try bad.writeInbound(Self.close(1000, [0xCE, 0xBA, 0xED, 0xA0, 0x80]))
        #expect(b.events.first?.hasPrefix("error 1007 ") == true, "\(b.events)")
    }

    @Test func dataAfterTheServersCloseIsIgnored() throws {
        let (channel, r) = try Self.channel()
        try channel.writeInbound(Self.close(1000))
        try channel.writeInbound(Self.frame(.text, Array("late".utf8)))
        #expect(r.events == ["control close"])
    }

    @Test func corruptDeflateDataIs1007() throws {
        let deflate = try PerMessageDeflate(parameters: DeflateParameters())
        let (channel, r) = try Self.channel(deflate: deflate)
        try channel.writeInbound(Self.frame(.text, [0xFF, 0xFF, 0xFF, 0x00], rsv1: true))
        #expect(r.events.first?.hasPrefix("error 1007 ") == true, "\(r.events)")
    }

    @Test(arguments: [false, true])
    func compressedMessagesRoundTrip(_ noContextTakeover: Bool) throws {
        var parameters = DeflateParameters()
        parameters.clientNoContextTakeover = noContextTakeover
        parameters.serverNoContextTakeover = noContextTakeover
        // The same parameters on both ends: what one compresses the other inflates.
        let sender = try PerMessageDeflate(parameters: parameters)
        let (channel, r) = try Self.channel(deflate: try PerMessageDeflate(parameters: parameters))
        let texts = ["hello hello hello", "hello hello hello", "", String(repeating: "abc", count: 1000)]
        for text in texts {
            let data = try sender.compress(ByteBuffer(string: text), allocator: ByteBufferAllocator())
            try channel.writeInbound(WebSocketFrame(fin: true, rsv1: true, opcode: .text, data: data))
        }
        #expect(r.events == texts.map { "message text \($0)" })
    }
}

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
