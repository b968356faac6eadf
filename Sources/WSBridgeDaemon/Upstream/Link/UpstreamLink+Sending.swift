import Logging
import NIOCore
import NIOWebSocket
import WSBridgeCore
import WSBridgeProtocol

// MARK: - Heartbeat

/// The heartbeat's pings (and application heartbeat text) on the open connection.
extension UpstreamLink {
    /// Writes a heartbeat ping with `payload` (and the application heartbeat text, if any) on
    /// the current connection, unless a close frame went on it.
    func writePing(_ payload: UInt64) {
        guard self.mayWrite, let channel = self.attempt.channel else { return }
        var buffer = channel.allocator.buffer(capacity: 8)
        buffer.writeInteger(payload)
        channel.write(WebSocketFrame(fin: true, opcode: .ping, maskKey: .random(), data: buffer), promise: nil)
        if let text = self.configuration.heartbeat.text {
            channel.write(WebSocketFrame(fin: true, opcode: .text, maskKey: .random(), data: channel.allocator.buffer(string: text)), promise: nil)
        }
        channel.flush()
    }
}

// MARK: - Sending

/// Sends: now when the link is open and writable, else into the bounded outbound queue, which
/// is flushed in order when the link opens or becomes writable again. With `queue.spool` set,
/// a queued send is stored in the spool before it is answered and joins the queue (in order)
/// once stored; a stored message leaves the spool once the socket took it.
extension UpstreamLink {
    /// Sends a message on the open link, or queues it (bounded) until the link opens.
    func send(_ message: OutboundMessage) -> SendOutcome {
        if self.isShuttingDown {
            return .rejected("wsbridged is shutting down; the message was not sent")
        }
        return self.outbound.send(message, on: self)
    }

    /// The spool stored (or refused) the sends up to `stored.through`.
    func spoolStored(_ stored: Spool.Stored) {
        if self.outbound.stored(stored) { self.flushOutbound() }
    }

    /// Writes a message now if it may go now: the link is open, no close frame has been sent
    /// (RFC 6455 §5.5.1: no data after it; the message waits for the next connection), and the
    /// channel is writable (a slow upstream fills the bounded queue, not NIO's buffer).
    func sendNow(_ message: OutboundMessage, flush: Bool = true, promise: EventLoopPromise<Void>? = nil) -> Bool {
        guard self.phase == .open, self.attempt.channel?.isWritable == true else { return false }
        return self.writeFrame(message, flush: flush, promise: promise)
    }

    /// Writes on the connection, open or still waiting to be ready, whether or not the channel
    /// is writable: what `sendNow` sends once it checked, and the session's own messages (opening
    /// and sticky sends), which are few and bounded (`upstream.on_open`, `local.sticky_bytes`)
    /// and must go ahead of the queue. False when there is no connection to write to, or a
    /// close frame was sent.
    @discardableResult
    func writeFrame(_ message: OutboundMessage, flush: Bool = true, promise: EventLoopPromise<Void>? = nil) -> Bool {
        guard self.mayWrite, let channel = self.attempt.channel else { return false }
        // With permessage-deflate, PerMessageDeflateHandler compresses it on the way out.
        let frame = WebSocketFrame(fin: true, opcode: message.kind == .text ? .text : .binary, maskKey: .random(), data: message.data)
        self.counted(sent: message.data.readableBytes)
        channel.write(frame, promise: promise)
        if flush { self.attempt.flushSoon(on: self.eventLoop) }
        return true
    }

    /// A sticky send (or its leave text) from the local plane: written now if the link is
    /// open, ahead of any queued sends; false when it is not (it goes after the next open).
    func sendAhead(_ message: OutboundMessage) -> Bool {
        guard self.phase == .open, !self.isShuttingDown else { return false }
        return self.writeFrame(message)
    }

    /// Sends what waited, in order, with one flush, while the link takes it.
    func flushOutbound() {
        let count = self.outbound.flush(to: self)
        guard count > 0 else { return }
        self.attempt.channel?.flush()
        self.logger.debug("sent \(count) queued message(s)", metadata: ["queue.left": "\(self.outbound.count)"])
    }

    func becameWritable(generation: Int) {
        guard self.attempt.isCurrent(generation) else { return }
        self.flushOutbound()
    }
}
