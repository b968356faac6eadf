// A debug (or fuzzing) build only: the targets reach the daemon's internals through @testable,
// which a release build does not allow (`swift build -c release` builds a stub, Replay.swift).
#if DEBUG || FUZZING
    import NIOCore
    import NIOEmbedded
    import NIOWebSocket
    import WSBridgeCore

    @testable import WSBridgeDaemon

    /// The upstream byte stream as a server sends it after the upgrade, through the real inbound
    /// handler (frames read in place, with or without permessage-deflate): nothing crashes; the
    /// bytes cut into reads anywhere give what they give in one read; and a message reassembled
    /// from any fragmentation is the same message sent whole. The first input byte picks the setup
    /// (bit 0: deflate, bit 1: no context takeover); the second, the fragment and read sizes.
    enum FramesTarget {
        static let maxMessageSize = 1 << 16

        /// What the frame handler passed on.
        final class Recorder {
            var messages: [(UpstreamMessage.Kind, [UInt8])] = []
            var failed = false
        }

        static func handler(_ deflate: PerMessageDeflate?, _ recorder: Recorder) -> UpstreamFrameHandler {
            UpstreamFrameHandler(
                callbacks: .init(
                    message: { kind, data in recorder.messages.append((kind, Array(data.readableBytesView))) },
                    control: { _ in },
                    error: { _ in recorder.failed = true }
                ),
                maxMessageSize: Self.maxMessageSize,
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
            Self.stream(rest, setup: setup, read: max(1, Int(bytes[1]) / 4))
            Self.reassembly(rest, setup: setup, fragment: max(1, Int(bytes[1])))
        }

        /// The bytes as the wire, in `read`-byte reads, through the handler a live link has.
        static func receive(_ bytes: [UInt8], setup: UInt8, read: Int) -> Recorder {
            let recorder = Recorder()
            let channel = EmbeddedChannel(handler: Self.handler(Self.deflate(setup), recorder))
            var start = 0
            repeat {
                let end = min(bytes.count, start + read)
                _ = try? channel.writeInbound(ByteBuffer(bytes: bytes[start..<end]))
                start = end
            } while start < bytes.count
            _ = try? channel.finish()
            return recorder
        }

        /// The bytes in one read and cut into small reads: the same messages, the same verdict.
        static func stream(_ bytes: [UInt8], setup: UInt8, read: Int) {
            let whole = Self.receive(bytes, setup: setup, read: max(1, bytes.count))
            for (_, data) in whole.messages where data.count > Self.maxMessageSize {
                fatalError("a message of \(data.count) bytes passed upstream.max_message_size = \(Self.maxMessageSize)")
            }
            let cut = Self.receive(bytes, setup: setup, read: read)
            guard whole.failed == cut.failed, whole.messages.map(\.1) == cut.messages.map(\.1), whole.messages.map(\.0) == cut.messages.map(\.0) else {
                fatalError(
                    "the bytes in reads of \(read) gave \(cut.messages.count) messages (failed: \(cut.failed)), in one read \(whole.messages.count) (failed: \(whole.failed))"
                )
            }
        }

        /// Frames as a server writes them (NIO's encoder: unmasked, the shortest length form).
        static func wire(_ frames: [WebSocketFrame]) -> [UInt8] {
            let channel = EmbeddedChannel(handler: WebSocketFrameEncoder())
            var out: [UInt8] = []
            for frame in frames { _ = try? channel.writeOutbound(frame) }
            while let part = try? channel.readOutbound(as: ByteBuffer.self) { out += part.readableBytesView }
            _ = try? channel.finish()  // an unfinished EmbeddedChannel keeps its pipeline alive
            return out
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
            // A frame longer than the bound is refused from its header (a test holds that).
            guard wire.readableBytes <= Self.maxMessageSize else { return }
            let compressed = sender != nil
            func deliver(_ frames: [WebSocketFrame]) -> Recorder {
                Self.receive(Self.wire(frames), setup: setup, read: 4096)
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
#endif
