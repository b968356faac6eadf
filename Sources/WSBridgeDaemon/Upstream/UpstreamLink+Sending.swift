import Logging
import NIOCore
import NIOWebSocket
import WSBridgeCore

/// Sends: now when the link is open and writable, else into the bounded outbound queue, which
/// is flushed in order when the link opens or becomes writable again.
extension UpstreamLink {
    /// Sends a message on the open link, or queues it (bounded) until the link opens.
    func submit(_ message: UpstreamMessage) -> SendOutcome {
        if self.stopping {
            return .rejected("wsbridged is shutting down; the message was not sent")
        }
        if self.outbound.isEmpty, self.write(message) {
            return .sent
        }
        if let problem = self.outbound.append(message) {
            self.metrics.dropped(1, .outboundQueueFull)
            return .rejected(problem)
        }
        return .queued(depth: self.outbound.count)
    }

    /// Sends a message if the link is open. Returns false when it is not.
    func send(_ message: UpstreamMessage) -> Bool {
        self.write(message)
    }

    /// Writes a message now if it may go now: the link is open, no close frame has been sent
    /// (RFC 6455 §5.5.1: no data after it; the message waits for the next connection), and the
    /// channel is writable (a slow upstream fills the bounded queue, not NIO's buffer).
    func write(_ message: UpstreamMessage, flush: Bool = true) -> Bool {
        guard self.machine.phase == .open, !self.sentClose, let channel = self.channel, channel.isWritable else { return false }
        // With permessage-deflate, PerMessageDeflateHandler compresses it on the way out.
        let frame = WebSocketFrame(fin: true, opcode: message.kind == .text ? .text : .binary, maskKey: .random(), data: message.data)
        self.messagesOut += 1
        self.bytesOut += UInt64(message.data.readableBytes)
        if flush {
            channel.writeAndFlush(frame, promise: nil)
        } else {
            channel.write(frame, promise: nil)
        }
        return true
    }

    /// Sends what waited, in order, with one flush, while the link takes it.
    func flushOutbound() {
        var count = 0
        while let message = self.outbound.first, self.write(message, flush: false) {
            _ = self.outbound.removeFirst()
            count += 1
        }
        guard count > 0 else { return }
        self.channel?.flush()
        self.logger.debug("sent \(count) queued message(s)", metadata: ["queue.left": "\(self.outbound.count)"])
    }

    func becameWritable(generation: Int) {
        guard generation == self.generation else { return }
        self.flushOutbound()
    }
}
