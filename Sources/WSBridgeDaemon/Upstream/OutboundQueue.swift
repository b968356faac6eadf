import NIOCore

/// Sends made while the link is not open, bounded by messages and bytes, flushed in order.
struct OutboundQueue {
    private(set) var messages = CircularBuffer<UpstreamMessage>()
    private(set) var bytes = 0
    var maxMessages: Int
    var maxBytes: Int

    init(maxMessages: Int, maxBytes: Int) {
        self.maxMessages = maxMessages
        self.maxBytes = maxBytes
    }

    var count: Int { self.messages.count }
    var first: UpstreamMessage? { self.messages.first }
    var isEmpty: Bool { self.messages.isEmpty }

    /// Appends, or explains why the queue cannot take the message.
    mutating func append(_ message: UpstreamMessage) -> String? {
        let size = message.data.readableBytes
        if self.messages.count >= self.maxMessages {
            return
                "the outbound queue is full (\(self.messages.count) of queue.max_messages = \(self.maxMessages) messages wait for the link to open or for the upstream to take them); retry later or raise queue.max_messages"
        }
        if self.bytes + size > self.maxBytes {
            return
                "the outbound queue is full (\(self.bytes) bytes waiting + \(size) > queue.max_bytes = \(self.maxBytes)); retry later or raise queue.max_bytes"
        }
        self.messages.append(message)
        self.bytes += size
        return nil
    }

    mutating func removeFirst() -> UpstreamMessage? {
        guard let m = self.messages.popFirst() else { return nil }
        self.bytes -= m.data.readableBytes
        return m
    }
}

/// What became of a send.
public enum SendOutcome: Sendable, Equatable {
    case sent
    /// Waiting for the link; `depth` messages are queued now, this one included.
    case queued(depth: Int)
    case rejected(String)
}
