import NIOCore

/// The last encoded message lines, for `subscribe` with `since`: bounded by `local.replay`
/// messages and `local.replay_bytes` bytes, the oldest going first. Holds the very buffers the
/// subscribers were sent (no copies, no parse trees).
struct ReplayRing {
    private(set) var entries = CircularBuffer<(seq: UInt64, line: ByteBuffer)>()
    private(set) var bytes = 0
    var maxMessages: Int
    var maxBytes: Int

    init(maxMessages: Int, maxBytes: Int) {
        self.maxMessages = maxMessages
        self.maxBytes = maxBytes
    }

    var oldestSeq: UInt64? { self.entries.first?.seq }

    /// False when replay is off (`local.replay` or `local.replay_bytes` 0): nothing is kept.
    var keepsLines: Bool { self.maxMessages > 0 && self.maxBytes > 0 }

    mutating func append(seq: UInt64, line: ByteBuffer) {
        guard self.keepsLines else { return }
        self.entries.append((seq, line))
        self.bytes += line.readableBytes
        self.trim()
    }

    /// Drops the oldest lines until both bounds hold (also after a reload lowered them).
    mutating func trim() {
        // The bounds are checked before an entry is touched: no copy of a line per message.
        while !self.entries.isEmpty, self.entries.count > self.maxMessages || self.bytes > self.maxBytes {
            self.bytes -= self.entries.removeFirst().line.readableBytes
        }
    }
}
