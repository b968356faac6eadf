import Logging
import NIOCore
import NIOWebSocket
import WSBridgeCore

/// Where a raw app's frames start: after message `seq` of `stream` (`resumes`: the app asked
/// for it, `?stream=ID&since=SEQ`).
struct WebSocketStart: Sendable {
    var stream: String
    var seq: UInt64
    var resumes: Bool
}

/// Who connected to the WebSocket face, as the upgrade found them.
struct WebSocketPeer: Sendable {
    /// The peer's user and group (its pid too on the Unix socket); nil: unknown (read-only).
    var credentials: PeerCredentials?
    /// The peer's user's groups, looked up off the loop.
    var groups: Set<UInt32>
    /// `tcp 127.0.0.1:53412` or `unix`.
    var address: String
    var userAgent: String?
    /// The request's path and query.
    var uri: String
    /// The client sent the face's token (`local.websocket.token_file`).
    var hasToken: Bool
}

/// One app on the WebSocket face (docs/websocket.md), after its upgrade: with `upstream.protocol
/// = "raw"`, every upstream message comes to it as a frame (text or binary as it came) and its
/// messages go upstream as they are, under the NDJSON socket's access rules. Control frames are
/// answered here (a ping's pong, the close handshake); a frame the RFC forbids closes it with the
/// code the RFC names. It is bounded as an NDJSON subscriber is (`local.subscriber_queue`,
/// `local.subscriber_queue_bytes`), but it cannot be told in its own protocol that messages were
/// dropped: one that falls behind past them is closed (1008), and the others go on. Confined to
/// the plane's event loop.
final class WebSocketApp: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = ByteBuffer

    /// 1013, "try again later" (RFC 6455 7.4.1 leaves it to the IANA registry).
    static let tryAgainLater = WebSocketErrorCode.unknown(1013)

    let id: Int
    let peer: WebSocketPeer
    /// May send upstream: root, the daemon's user, `access.write_*`, or the face's token.
    let mayWrite: Bool
    /// Raw: where its frames start (the seq its first frame follows).
    let start: WebSocketStart?
    /// With `upstream.protocol`: what its library expects of the server (nil: raw).
    private let face: AppProtocolFace?
    /// Its own session id, where its protocol names one (Engine.IO's, Socket.IO's).
    let sid: String
    /// The face's pings to it (Engine.IO's), and whether the last one is unanswered.
    private var pingTimer: Scheduled<Void>?
    private var awaitingPong = false
    private let plane: LocalPlane
    private var context: ChannelHandlerContext?
    /// Where its frames are written, as bytes: past NIO's frame encoder.
    private let output: FrameOutput
    /// Frames waiting for the socket (each entry one flush's frames), and their counts.
    private var queue = CircularBuffer<Waiting>()
    /// One flush's frames and how many messages they hold (a struct, not a tuple: the queue's
    /// code is then specialized, where a tuple's goes through the runtime's generic witnesses).
    private struct Waiting {
        var frames: ByteBuffer
        var messages: Int
    }
    /// Frames the protocol layer routed to it since the fan-out's last flush (`FrameFanout`).
    var routed = Routed()
    struct Routed {
        var frames = ByteBuffer()
        var messages = 0
    }
    private var queuedMessages = 0
    private var queuedBytes = 0
    private let maxMessages: Int
    private let maxBytes: Int
    /// Messages written or queued for it since it connected.
    private(set) var messages: UInt64 = 0
    /// A close frame went (the handshake's first half, or its echo).
    private var closeSent = false
    /// The latest ping not answered yet (its socket was full).
    private var pendingPong: ByteBuffer?
    /// Ends the connection when its close frame was not written within
    /// `local.websocket.close_timeout`.
    private var closeTimer: Scheduled<Void>?
    /// For its control frames (a ping's pong, the close).
    private let allocator = ByteBufferAllocator()

    init(
        id: Int, peer: WebSocketPeer, mayWrite: Bool, plane: LocalPlane, output: FrameOutput, face: AppProtocolFace?, start: WebSocketStart?,
        limits: Configuration.Local
    ) {
        self.id = id
        self.start = start
        self.face = face
        self.sid = "wsb\(id)-" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
        self.output = output
        self.peer = peer
        self.mayWrite = mayWrite
        self.plane = plane
        self.maxMessages = limits.subscriberQueue
        self.maxBytes = limits.subscriberQueueBytes
    }

    /// Messages and bytes waiting for its socket now.
    var queued: (messages: Int, bytes: Int) { (self.queuedMessages, self.queuedBytes) }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        // What its library waits for before it says anything: first, before any message.
        if let greeting = self.face?.greeting(sid: self.sid, maxPayload: self.plane.webSocket.limits.maxMessageSize, clientID: self.id) {
            let opcode: WebSocketOpcode = self.face?.binaryFrames == true ? .binary : .text
            self.write(ServerFrame.frame(opcode, ByteBuffer(string: greeting), allocator: self.allocator), flush: true)
        }
        self.armPing(context.eventLoop)
        self.plane.webSocketAdded(self)
    }

    private func armPing(_ eventLoop: any EventLoop) {
        guard let ping = self.face?.ping else { return }
        self.pingTimer = eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(ping.every.nanoseconds)) { [weak self] in
            guard let self else { return }
            self.pingTick(ping.text)
            self.armPing(eventLoop)
        }
    }

    /// The face's ping (Engine.IO's), unless the last one is still unanswered: then the app is
    /// closed, as a Socket.IO server closes a client that stopped answering.
    private func pingTick(_ text: String) {
        guard !self.closeSent else { return }
        guard !self.awaitingPong else {
            return self.fail(.policyViolation, "no answer to the server's ping within pingTimeout (Engine.IO): the client stopped")
        }
        self.awaitingPong = true
        _ = self.plane.fanout.deliverToWebSocketApp(self.id, data: ByteBuffer(string: text))
    }

    /// The answer to the face's ping came.
    func ponged() { self.awaitingPong = false }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.plane.webSocketRemoved(self)
        self.closeTimer?.cancel()
        self.pingTimer?.cancel()
        self.queue.removeAll()
        (self.queuedMessages, self.queuedBytes) = (0, 0)
        self.context = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.plane.webSocketRemoved(self)
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = Self.unwrapInboundIn(data)
        guard !self.closeSent || frame.opcode == .connectionClose else { return }
        guard !frame.rsv1 && !frame.rsv2 && !frame.rsv3 else {
            return self.fail(.protocolError, "a frame with a reserved bit set (no extension was negotiated)")
        }
        switch frame.opcode {
        case .text:
            let payload = frame.unmaskedData
            var utf8 = UTF8Validator()
            guard utf8.feed(payload.readableBytesView), utf8.isComplete else {
                return self.fail(.dataInconsistentWithMessage, "a text message that is not UTF-8")
            }
            self.received(OutboundMessage(kind: .text, data: payload))
        case .binary:
            self.received(OutboundMessage(kind: .binary, data: frame.unmaskedData))
        case .ping:
            // An app that pings and reads nothing must not pile pongs up: while its socket is
            // full only the latest ping is answered, once it drains (RFC 6455 5.5.3 allows it).
            self.pendingPong = frame.unmaskedData
            if context.channel.isWritable { self.answerPing() }
        case .pong:
            break
        case .connectionClose:
            self.closeReceived(frame.unmaskedData)
        default:
            self.fail(.protocolError, "a frame of opcode \(frame.opcode) (RFC 6455 defines none)")
        }
    }

    /// Why an app that may not send is closed when it sends, and what lets it.
    var mayNotSend: String {
        let who = self.peer.credentials.map { "uid \($0.uid)" } ?? "a client of unknown user"
        return "\(who) may not send upstream: add it to access.write_uids or write_groups"
    }

    /// A message from the app: with a protocol, its messages answered here or through the
    /// protocol layer; raw, upstream as it is, if it may send.
    private func received(_ message: OutboundMessage) {
        if let face = self.face {
            if let (code, reason) = self.plane.webSocketProtocolMessage(message, from: self, face: face) { self.fail(code, reason) }
            return
        }
        guard self.mayWrite else { return self.fail(.policyViolation, self.mayNotSend) }
        if let refusal = self.plane.webSocketSend(message, from: self) {
            self.fail(Self.tryAgainLater, refusal)
        }
    }

    /// The app's close frame: its code checked (RFC 6455 7.4), echoed, and the connection ends.
    private func closeReceived(_ payload: ByteBuffer) {
        var payload = payload
        guard payload.readableBytes != 1 else { return self.fail(.protocolError, "a close frame of one byte (a code takes two)") }
        var echo = WebSocketErrorCode.normalClosure
        if let code = payload.readInteger(as: UInt16.self) {
            guard Self.isValidCloseCode(code) else { return self.fail(.protocolError, "a close frame with code \(code), which no client may send") }
            var utf8 = UTF8Validator()
            guard utf8.feed(payload.readableBytesView), utf8.isComplete else {
                return self.fail(.dataInconsistentWithMessage, "a close frame whose reason is not UTF-8")
            }
            echo = WebSocketErrorCode(codeNumber: Int(code))
        }
        self.close(echo, reason: "")
    }

    /// Codes a peer may send in a close frame (RFC 6455 7.4.1 and 7.4.2).
    static func isValidCloseCode(_ code: UInt16) -> Bool {
        switch code {
        case 1000...1003, 1007...1014, 3000...4999: true
        default: false
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        switch error {
        case NIOWebSocketFrameAggregator.Error.accumulatedFrameSizeIsTooLarge:
            self.fail(.messageTooLarge, "a message over local.websocket.max_message_size (\(self.plane.webSocket.limits.maxMessageSize) bytes)")
        case NIOWebSocketError.invalidFrameLength:
            self.fail(.messageTooLarge, "a frame over local.websocket.max_frame_size (\(self.plane.webSocket.limits.maxFrameSize) bytes)")
        case is NIOWebSocketError, is NIOWebSocketFrameAggregator.Error:
            self.fail(.protocolError, "\(error)")
        default:
            context.close(promise: nil)
        }
    }

    /// Closes the connection for what the app did, with a code and a reason its library logs.
    func fail(_ code: WebSocketErrorCode, _ reason: String) {
        self.plane.logger.warning(
            "closing WebSocket app \(self.id) (\(self.peer.address)): \(reason)", metadata: ["client.id": "\(self.id)", "code": "\(code)"])
        self.close(code, reason: reason)
    }

    /// Sends the close frame (once), then ends the connection once it is written.
    func close(_ code: WebSocketErrorCode, reason: String) {
        guard let context = self.context, !self.closeSent else { return }
        self.closeSent = true
        self.queue.removeAll()
        (self.queuedMessages, self.queuedBytes) = (0, 0)
        let frame = ServerFrame.close(code: UInt16(webSocketErrorCode: code), reason: reason, allocator: self.allocator)
        guard let written = self.output.writeLast(frame) else { return context.close(promise: nil) }
        written.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
        // An app that reads no more never takes the frame: its connection ends all the same.
        self.closeTimer = context.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(self.plane.webSocket.limits.closeTimeout.nanoseconds)) {
            context.close(promise: nil)
        }
    }

    // MARK: - Delivery

    /// `frames` (`messages` of them, one flush's) to the socket, or behind what waits; past the
    /// bounds the app is closed.
    func deliver(_ frames: ByteBuffer, messages: Int) {
        guard let context = self.context, !self.closeSent else { return }
        self.messages += UInt64(messages)
        if self.queue.isEmpty && context.channel.isWritable {
            self.write(frames, flush: true)
            return
        }
        self.queue.append(Waiting(frames: frames, messages: messages))
        self.queuedMessages += messages
        self.queuedBytes += frames.readableBytes
        if self.queuedMessages > self.maxMessages || self.queuedBytes > self.maxBytes {
            let (n, bytes) = (self.queuedMessages, self.queuedBytes)
            self.fail(
                .policyViolation,
                "too slow: \(n) messages (\(bytes) bytes) waiting, past local.subscriber_queue (\(self.maxMessages)) or subscriber_queue_bytes")
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { self.answerPing() }
        var wrote = false
        while context.channel.isWritable, let next = self.queue.popFirst() {
            self.queuedMessages -= next.messages
            self.queuedBytes -= next.frames.readableBytes
            self.output.write(next.frames, flush: false)
            wrote = true
        }
        if wrote { self.output.flush() }
        context.fireChannelWritabilityChanged()
    }

    private func answerPing() {
        guard let payload = self.pendingPong, !self.closeSent else { return }
        self.pendingPong = nil
        self.write(ServerFrame.frame(.pong, payload, allocator: self.allocator), flush: true)
    }

    private func write(_ bytes: ByteBuffer, flush: Bool) {
        self.output.write(bytes, flush: flush)
    }
}

/// Where an app's frames go as bytes: it stands between NIO's frame encoder and the socket, so
/// what it writes passes no encoder (the upgrade puts one in, for `WebSocketFrame`s).
final class FrameOutput: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    private var context: ChannelHandlerContext?

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }
    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    func write(_ bytes: ByteBuffer, flush: Bool) {
        guard let context = self.context else { return }
        if flush {
            context.writeAndFlush(Self.wrapOutboundOut(bytes), promise: nil)
        } else {
            context.write(Self.wrapOutboundOut(bytes), promise: nil)
        }
    }

    /// The last bytes the connection sends (a close frame): done once they are written (nil:
    /// the connection is gone).
    func writeLast(_ bytes: ByteBuffer) -> EventLoopFuture<Void>? {
        self.context.map { $0.writeAndFlush(Self.wrapOutboundOut(bytes)) }
    }

    func flush() { self.context?.flush() }
}

@available(*, unavailable)
extension FrameOutput: Sendable {}

@available(*, unavailable)
extension WebSocketApp: Sendable {}
