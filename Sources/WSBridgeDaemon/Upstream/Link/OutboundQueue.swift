import NIOCore

/// Sends made while the link is not open, bounded by messages and bytes, flushed in order.
/// With the spool on, a send is first `reserve`d (it counts against the bounds while the spool
/// writes it), then `commit`ted once stored, or `release`d if it could not be.
struct OutboundQueue {
    struct Entry {
        var message: UpstreamMessage
        /// Its record in the spool (0: not spooled).
        var spoolID: UInt64
    }

    private(set) var entries = CircularBuffer<Entry>()
    private(set) var bytes = 0
    /// Sends being written to the spool: counted, not yet in `entries`.
    private(set) var reserved = 0
    private(set) var reservedBytes = 0
    var maxMessages: Int
    var maxBytes: Int

    init(maxMessages: Int, maxBytes: Int) {
        self.maxMessages = maxMessages
        self.maxBytes = maxBytes
    }

    var count: Int { self.entries.count }
    var first: Entry? { self.entries.first }
    var isEmpty: Bool { self.entries.isEmpty }
    /// Nothing waits, and nothing is on its way into the queue: a send may go straight out.
    var isIdle: Bool { self.entries.isEmpty && self.reserved == 0 }

    /// Appends, or explains why the queue cannot take the message.
    mutating func append(_ message: UpstreamMessage) -> String? {
        if let problem = self.reserve(message.data.readableBytes) { return problem }
        self.commit(message, spoolID: 0)
        return nil
    }

    /// Counts a message of `size` bytes against the bounds, or explains why it does not fit.
    mutating func reserve(_ size: Int) -> String? {
        let count = self.entries.count + self.reserved
        if count >= self.maxMessages {
            return
                "the outbound queue is full (\(count) of queue.max_messages = \(self.maxMessages) messages wait for the link to open or for the upstream to take them); retry later or raise queue.max_messages"
        }
        let bytes = self.bytes + self.reservedBytes
        if bytes + size > self.maxBytes {
            return
                "the outbound queue is full (\(bytes) bytes waiting + \(size) > queue.max_bytes = \(self.maxBytes)); retry later or raise queue.max_bytes"
        }
        self.reserved += 1
        self.reservedBytes += size
        return nil
    }

    /// Queues a reserved message.
    mutating func commit(_ message: UpstreamMessage, spoolID: UInt64) {
        self.release(message.data.readableBytes)
        self.entries.append(Entry(message: message, spoolID: spoolID))
        self.bytes += message.data.readableBytes
    }

    /// Gives back a reservation whose message was not queued.
    mutating func release(_ size: Int) {
        self.reserved -= 1
        self.reservedBytes -= size
    }

    /// Queues messages without checking the bounds: ones the spool restored at start, or ones
    /// handed to a connection that died before it wrote them (they go first, in order).
    mutating func restore(_ entries: some Collection<Entry>, atFront: Bool) {
        if atFront {
            self.entries.insert(contentsOf: entries, at: self.entries.startIndex)
        } else {
            self.entries.append(contentsOf: entries)
        }
        self.bytes += entries.reduce(0) { $0 + $1.message.data.readableBytes }
    }

    mutating func removeFirst() -> Entry? {
        guard let e = self.entries.popFirst() else { return nil }
        self.bytes -= e.message.data.readableBytes
        return e
    }
}

/// What became of a send.
package enum SendOutcome: Sendable, Equatable {
    case sent
    /// Waiting for the link; `depth` messages are queued now, this one included.
    case queued(depth: Int)
    case rejected(String)
    /// Being stored in the spool: the outcome follows once it is (`queued`) or failed (`rejected`).
    case spooling(EventLoopFuture<SendOutcome>)
}
