import NIOCore

/// The last messages, for `subscribe` with `since` and a WebSocket app's resume: bounded by
/// `local.replay` messages and `local.replay_bytes` bytes, the oldest going first. Holds the very
/// buffers the subscribers were sent (no copies, no parse trees): a message's NDJSON line where
/// one was written (an NDJSON subscriber was there), else its WebSocket frame (only the face's
/// apps were: no line is written for nobody); each is made into the other on a replay
/// (`Fanout.ringLine`, `Fanout.framesFromRing`).
struct ReplayRing {
    /// One message kept (a struct, not a tuple: the ring's code is then specialized, where a
    /// tuple's goes through the runtime's generic witnesses for every message).
    struct Entry {
        var seq: UInt64
        /// Its NDJSON line, or (`isFrame`) its WebSocket frame.
        var bytes: ByteBuffer
        var isFrame: Bool
        /// When it was read (a frame carries no time; its line, made on a replay, does).
        var receivedAtMillis: Int64
    }

    private(set) var entries = CircularBuffer<Entry>()
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
        self.append(Entry(seq: seq, bytes: line, isFrame: false, receivedAtMillis: 0))
    }

    mutating func append(_ entry: Entry) {
        guard self.keepsLines else { return }
        self.entries.append(entry)
        self.bytes += entry.bytes.readableBytes
        self.trim()
    }

    /// Drops the oldest lines until both bounds hold (also after a reload lowered them).
    mutating func trim() {
        // The bounds are checked before an entry is touched: no copy of a line per message.
        while !self.entries.isEmpty, self.entries.count > self.maxMessages || self.bytes > self.maxBytes {
            self.bytes -= self.entries.removeFirst().bytes.readableBytes
        }
    }
}
