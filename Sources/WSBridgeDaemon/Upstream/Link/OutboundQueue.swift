import NIOCore

/// Sends made while the link is not open, bounded by messages and bytes, flushed in order.
/// With the spool on, a send is first `reserve`d (it counts against the bounds while the spool
/// writes it), then `commit`ted once stored, or `release`d if it could not be.
struct OutboundQueue {
    struct Entry {
        var message: OutboundMessage
        /// Its record in the spool (0: not spooled).
        var spoolID: UInt64
    }

    private(set) var entries = CircularBuffer<Entry>()
    private(set) var bytes = 0
    /// Sends being written to the spool: counted, not yet in `entries`.
    private(set) var reserved = 0
    private(set) var reservedBytes = 0
    private(set) var maxMessages: Int
    private(set) var maxBytes: Int

    init(maxMessages: Int, maxBytes: Int) {
        self.maxMessages = maxMessages
        self.maxBytes = maxBytes
    }

    /// A reload's bounds: what waits already stays; new messages meet them.
    mutating func setBounds(maxMessages: Int, maxBytes: Int) {
        self.maxMessages = maxMessages
        self.maxBytes = maxBytes
    }

    var count: Int { self.entries.count }
    var first: Entry? { self.entries.first }
    var isEmpty: Bool { self.entries.isEmpty }
    /// Nothing waits, and nothing is on its way into the queue: a send may go straight out.
    var isIdle: Bool { self.entries.isEmpty && self.reserved == 0 }

    /// Why the queue cannot take a message: the bound it would break, which names its setting.
    enum Full: Error, Equatable, CustomStringConvertible {
        /// `waiting` messages of queue.max_messages = `max`.
        case messages(waiting: Int, max: Int)
        /// `waiting` bytes plus the message's `adding` would pass queue.max_bytes = `max`.
        case bytes(waiting: Int, adding: Int, max: Int)

        var description: String {
            switch self {
            case .messages(let waiting, let max):
                "the outbound queue is full (\(waiting) of queue.max_messages = \(max) messages wait for the link to open or for the upstream to take them); retry later or raise queue.max_messages"
            case .bytes(let waiting, let adding, let max):
                "the outbound queue is full (\(waiting) bytes waiting + \(adding) > queue.max_bytes = \(max)); retry later or raise queue.max_bytes"
            }
        }
    }

    /// Appends, or says which bound the message would break.
    mutating func append(_ message: OutboundMessage) throws(Full) {
        try self.reserve(message.data.readableBytes)
        self.commit(message, spoolID: 0)
    }

    /// Counts a message of `size` bytes against the bounds, or says which it would break.
    mutating func reserve(_ size: Int) throws(Full) {
        let count = self.entries.count + self.reserved
        guard count < self.maxMessages else { throw .messages(waiting: count, max: self.maxMessages) }
        let bytes = self.bytes + self.reservedBytes
        guard bytes + size <= self.maxBytes else { throw .bytes(waiting: bytes, adding: size, max: self.maxBytes) }
        self.reserved += 1
        self.reservedBytes += size
    }

    /// Queues a reserved message.
    mutating func commit(_ message: OutboundMessage, spoolID: UInt64) {
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
