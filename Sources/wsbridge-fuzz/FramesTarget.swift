import NIOCore
import NIOEmbedded
import NIOWebSocket
import WSBridgeCore

@testable import WSBridgeDaemon

/// The upstream byte stream as a server sends it after the upgrade, through the real inbound
/// handlers (the UTF-8 stream check, NIO's frame decoder, the frame handler with or without
/// permessage-deflate): nothing crashes, and a message reassembled from any fragmentation is
/// the same message sent whole. The first input byte picks the setup (bit 0: deflate, bit 1:
/// no context takeover); the second, the fragment size.
enum FramesTarget {
    static let maxMessageSize = 1 << 16

    /// What the frame handler passed on.
    final class Recorder {
        var messages: [(UpstreamMessage.Kind, [UInt8])] = []
        var failed = false
    }

    static func handler(_ deflate: PerMessageDeflate?, textChecked: Bool, _ recorder: Recorder) -> UpstreamFrameHandler {
        UpstreamFrameHandler(
            callbacks: .init(
                message: { kind, data in recorder.messages.append((kind, Array(data.readableBytesView))) },
                control: { _ in },
                error: { _ in recorder.failed = true }
            ),
            maxMessageSize: Self.maxMessageSize,
            textCheckedUpstream: textChecked,
            deflate: deflate
        )
    }

    static func deflate(_ setup: UInt8) -> PerMessageDeflate? {
        guard setup & 1 == 1 else { return nil }
        var parameters = DeflateParameters()
        parameters.serverNoContextTakeover = setup & 2 == 2
        parameters.clientNoContextTakeover = setup & 2 == 2
        return try? PerMessageDeflate(parameters: parameters)
    }

    static func run(_ bytes: [UInt8]) {
        guard bytes.count >= 2 else { return }
        let setup = bytes[0]
        let rest = Array(bytes.dropFirst(2))
        Self.stream(rest, setup: setup)
        Self.reassembly(rest, setup: setup, fragment: max(1, Int(bytes[1])))
    }

    /// The bytes as the wire, through the pipeline a live link has.
    static func stream(_ bytes: [UInt8], setup: UInt8) {
        let recorder = Recorder()
        let channel = EmbeddedChannel()
        let sync = channel.pipeline.syncOperations
        try? sync.addHandler(TextStreamValidator())
        try? sync.addHandler(ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: Self.maxMessageSize)))
        try? sync.addHandler(Self.handler(Self.deflate(setup), textChecked: true, recorder))
        _ = try? channel.writeInbound(ByteBuffer(bytes: bytes))
        _ = try? channel.finish()
        for (_, data) in recorder.messages where data.count > Self.maxMessageSize {
            fatalError("a message of \(data.count) bytes passed upstream.max_message_size = \(Self.maxMessageSize)")
        }
    }

    /// The bytes as one message, sent whole and in fragments: the same message arrives.
    static func reassembly(_ payload: [UInt8], setup: UInt8, fragment: Int) {
        let kind: UpstreamMessage.Kind = String(validating: payload, as: UTF8.self) != nil ? .text : .binary
        let opcode: WebSocketOpcode = kind == .text ? .text : .binary
        // What goes on the wire: compressed with a fresh context, when deflate is on.
        let sender = Self.deflate(setup)
        var wire = ByteBuffer(bytes: payload)
        if let sender {
            guard let compressed = try? sender.compress(wire, allocator: ByteBufferAllocator()) else { return }
            wire = compressed
        }
        // A whole frame longer than the bound never reaches the handler: NIO's frame decoder
        // (maxFrameSize = upstream.max_message_size) refuses it first.
        guard wire.readableBytes <= Self.maxMessageSize else { return }
        let compressed = sender != nil
        func deliver(_ frames: [WebSocketFrame]) -> Recorder {
            let recorder = Recorder()
            let channel = EmbeddedChannel(handler: Self.handler(Self.deflate(setup), textChecked: false, recorder))
            for frame in frames { _ = try? channel.writeInbound(frame) }
            _ = try? channel.finish()
            return recorder
        }
        let whole = deliver([WebSocketFrame(fin: true, rsv1: compressed, opcode: opcode, data: wire)])
        var fragments: [WebSocketFrame] = []
        var remaining = wire
        repeat {
            let chunk = remaining.readSlice(length: min(fragment, remaining.readableBytes))!
            let first = fragments.isEmpty
            fragments.append(
                WebSocketFrame(fin: remaining.readableBytes == 0, rsv1: first && compressed, opcode: first ? opcode : .continuation, data: chunk))
        } while remaining.readableBytes > 0
        let pieces = deliver(fragments)
        guard whole.failed == pieces.failed,
            whole.messages.map(\.1) == pieces.messages.map(\.1),
            whole.messages.map(\.0) == pieces.messages.map(\.0)
        else {
            fatalError(
                "\(fragments.count) fragments of \(fragment) bytes did not give the message sent whole (whole failed: \(whole.failed), pieces failed: \(pieces.failed))"
            )
        }
        if !whole.failed, payload.count <= Self.maxMessageSize, whole.messages.map(\.1) != [payload] {
            fatalError("the message sent whole did not arrive as it was sent")
        }
    }
}
