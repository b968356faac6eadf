import CompressNIO
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing
import WSBridgeCore

@testable import WSBridgeDaemon

/// The frame handler's rules on an EmbeddedChannel: frames read from bytes cut anywhere,
/// reassembly, UTF-8 (failing fast inside a frame), RSV bits, sizes, close frames.
@Suite struct UpstreamFrameHandlerTests {
    /// What the handler handed on, as lines: `message text|binary PAYLOAD`, `control OPCODE`,
    /// `error CODE DESCRIPTION`.
    final class Recorder {
        var events: [String] = []
    }

    /// Frames written inbound go to the handler as the bytes a server sends (NIO's encoder).
    final class FrameWire: ChannelInboundHandler {
        typealias InboundIn = WebSocketFrame
        typealias InboundOut = ByteBuffer
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            context.fireChannelRead(Self.wrapInboundOut(UpstreamFrameHandlerTests.wire(Self.unwrapInboundIn(data))))
        }
    }

    static func wire(_ frame: WebSocketFrame) -> ByteBuffer {
        let encoder = EmbeddedChannel(handler: WebSocketFrameEncoder())
        var out = ByteBuffer()
        try! encoder.writeOutbound(frame)
        while let part = try! encoder.readOutbound(as: ByteBuffer.self) { out.writeImmutableBuffer(part) }
        _ = try? encoder.finish()
        return out
    }

    /// `bytes`: the test writes the wire's bytes itself (no `FrameWire` in front).
    static func channel(deflate: PerMessageDeflate? = nil, maxMessageSize: Int = 1 << 20, bytes: Bool = false) throws -> (EmbeddedChannel, Recorder) {
        let recorder = Recorder()
        let handler = UpstreamFrameHandler(
            callbacks: .init(
                message: { kind, data in recorder.events.append("message \(kind == .text ? "text" : "binary") \(String(buffer: data))") },
                control: { frame in
                    recorder.events.append(frame.opcode == .connectionClose ? "control close" : frame.opcode == .ping ? "control ping" : "control other")
                },
                error: { error in
                    let e = error as? UpstreamFrameError
                    recorder.events.append("error \(e.map { UInt16(webSocketErrorCode: $0.closeCode) } ?? 0) \(error)")
                }
            ),
            maxMessageSize: maxMessageSize,
            deflate: deflate
        )
        let channel = EmbeddedChannel(handler: handler)
        if !bytes { try channel.pipeline.syncOperations.addHandler(FrameWire(), position: .first) }
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

    /// NATS closes a stale connection with 1006 "Stale Connection": the reason is told too.
    @Test func anInvalidCloseCodesReasonIsTold() throws {
        let (channel, r) = try Self.channel()
        try channel.writeInbound(Self.close(1006, Array("Stale Connection".utf8)))
        #expect(r.events.first?.contains("close code 1006, reason \"Stale Connection\" is not one a peer may send") == true, "\(r.events)")
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

    // MARK: - The byte stream

    /// An unmasked frame as a server sends it, header and payload.
    static func bytes(_ opcode: UInt8, _ payload: [UInt8], fin: Bool = true) -> [UInt8] {
        Array(Self.wire(WebSocketFrame(fin: fin, opcode: WebSocketOpcode(encodedWebSocketOpcode: opcode)!, data: ByteBuffer(bytes: payload))).readableBytesView)
    }

    @Test func aBadByteInsideAFrameFailsBeforeTheFrameIsComplete() throws {
        let (channel, r) = try Self.channel(bytes: true)
        let good = Self.bytes(0x1, Array("fine".utf8))
        let bad = Self.bytes(0x1, Array(String(repeating: "x", count: 200).utf8) + [0xED, 0xA0, 0x80] + Array("tail".utf8))
        // The good frame and the first 150 bytes of the bad one: all valid so far.
        try channel.writeInbound(ByteBuffer(bytes: good + bad.prefix(150)))
        #expect(r.events == ["message text fine"])
        // The surrogate arrives; the frame's end has not.
        try channel.writeInbound(ByteBuffer(bytes: bad[150..<210]))
        #expect(r.events.count == 2)
        #expect(r.events.last?.hasPrefix("error 1007 ") == true, "\(r.events)")
        // Nothing after the failure is read.
        try channel.writeInbound(ByteBuffer(bytes: bad[210...] + good))
        #expect(r.events.count == 2)
    }

    @Test func framesCutAtEveryByteGiveTheSameMessages() throws {
        let text = Array("κόσμε ".utf8) + Array(String(repeating: "y", count: 300).utf8)
        let big = [UInt8](repeating: 0xAB, count: 70_000)  // a 64-bit length
        let small =
            Self.bytes(0x1, Array(text.prefix(7)), fin: false) + Self.bytes(0x9, [1, 2])
            + Self.bytes(0x0, Array(text.dropFirst(7))) + Self.bytes(0x2, [0xFF, 0xFE, 0xED])
            + Self.bytes(0x1, []) + Self.bytes(0x1, Array("end".utf8))
        let smallEvents = [
            "control ping", "message text \(String(decoding: text, as: UTF8.self))",
            "message binary \(String(decoding: [0xFF, 0xFE, 0xED] as [UInt8], as: UTF8.self))", "message text ", "message text end",
        ]
        // The 70,000-byte frame (a 64-bit length) only in the larger reads: a byte at a time
        // through EmbeddedChannel, it would take seconds in a debug build.
        let withBig = small + Self.bytes(0x2, big)
        for (read, stream) in [(1, small), (2, small), (3, small), (7, small), (125, withBig), (4096, withBig), (withBig.count, withBig)] {
            let expected = stream.count == small.count ? smallEvents : smallEvents + ["message binary \(String(decoding: big, as: UTF8.self))"]
            let (channel, r) = try Self.channel(bytes: true)
            var start = 0
            while start < stream.count {
                let end = min(stream.count, start + read)
                try channel.writeInbound(ByteBuffer(bytes: stream[start..<end]))
                start = end
            }
            #expect(r.events == expected, "reads of \(read) bytes")
        }
    }

    @Test func aFrameLongerThanTheBoundIsRefusedFromItsHeader() throws {
        let (channel, r) = try Self.channel(maxMessageSize: 1000, bytes: true)
        // The header of a 70,000-byte binary frame, and none of its payload.
        try channel.writeInbound(ByteBuffer(bytes: [0x82, 127, 0, 0, 0, 0, 0, 1, 0x11, 0x70]))
        #expect(r.events.count == 1)
        #expect(r.events.first?.hasPrefix("error 1009 ") == true, "\(r.events)")
    }

    @Test(
        arguments: [
            ([0x81, 0x81, 1, 2, 3, 4, 0x41] as [UInt8], "masked"),
            ([0x89, 126, 0, 126] + [UInt8](repeating: 0, count: 126), "control frame of 126 bytes"),
            ([0x83, 0], "unknown opcode 3"),
            ([0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 1], "most significant bit"),
        ] as [([UInt8], String)])
    func malformedFramesAre1002(_ bytes: [UInt8], _ mentions: String) throws {
        let (channel, r) = try Self.channel(bytes: true)
        try channel.writeInbound(ByteBuffer(bytes: bytes))
        #expect(r.events.count == 1)
        #expect(r.events.first?.hasPrefix("error 1002 ") == true, "\(r.events)")
        #expect(r.events.first?.contains(mentions) == true, "\(r.events)")
    }

    @Test func aMessageInOneReadIsHandedOnWithoutACopy() throws {
        let recorder = Recorder()
        let handler = UpstreamFrameHandler(
            callbacks: .init(
                message: { _, data in
                    data.withUnsafeReadableBytes { recorder.events.append("\(Int(bitPattern: $0.baseAddress))") }
                },
                control: { _ in }, error: { recorder.events.append("error \($0)") }),
            maxMessageSize: 1 << 20)
        let channel = EmbeddedChannel(handler: handler)
        let read = ByteBuffer(bytes: Self.bytes(0x1, Array("abc".utf8)))
        let base = read.withUnsafeReadableBytes { Int(bitPattern: $0.baseAddress) }
        try channel.writeInbound(read)
        // The payload is the read buffer's bytes after the 2-byte header.
        #expect(recorder.events == ["\(base + 2)"])
    }
}
