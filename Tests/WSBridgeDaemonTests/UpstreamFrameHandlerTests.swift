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
