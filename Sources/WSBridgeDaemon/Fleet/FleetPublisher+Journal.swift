import DequeModule
import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// `[fleet]` with `[journal]` (docs/fleet.md): NATS away past `fleet.max_backlog_bytes` loses
/// nothing. The newest waiting messages leave memory (down to half the bound) and, from the first
/// of them on, every message goes into the stream from the journal, read back a chunk at a time
/// (at most `fleet.max_in_flight` messages ahead of what is in flight), in seq order after the
/// ones still in memory; once the reads reach the last message numbered, new ones wait in memory
/// again. Only what the journal no longer has (its retention, a failed write) is given up.
extension FleetPublisher {
    struct Spill {
        /// Where the next read starts.
        var cursor: Journal.Cursor
        /// The message numbered before the next one read (its `previous`).
        var previous: UInt64?
        /// Read, not yet handed to the client.
        var buffer: Deque<Pending> = []
        var reading = false
        var retry: Scheduled<Void>?
    }

    /// Drops the newest waiting messages from memory, down to `above` bytes, to be read again
    /// from the journal; false when there is no journal to read them from.
    func spillToJournal(above bytes: Int) -> Bool {
        guard let journal = self.journal, !journal.isStopped, self.spill == nil else { return self.spill != nil }
        var first: Pending?
        while self.waitingBytes > bytes, let newest = self.waiting.popLast() {
            self.waitingBytes -= newest.message.data.readableBytes
            if newest.to != nil { self.giveUpRouted(newest.seq) }
            first = newest
        }
        guard let first else { return true }
        self.spill = Spill(cursor: Journal.Cursor(from: first.seq), previous: first.previous)
        self.logger.warning(
            "fleet: past fleet.max_backlog_bytes = \(self.fleet.maxBacklogBytes) waiting for NATS: from seq \(first.seq) on, messages go into the stream from the journal"
        )
        return true
    }

    /// A message for one follower's app that left memory: no journal has it, so it is given up
    /// (counted in `lost`; the app's `request` waiting for it times out).
    func giveUpRouted(_ seq: UInt64) {
        self.lost += 1
        self.acknowledgedAhead.insert(seq)
    }

    /// Reads the next chunk from the journal while the messages read are fewer than a flight,
    /// and only while NATS is there to take them: read while it is away, they would sit in
    /// memory past `max_backlog_bytes` (the connection's `pump` reads again).
    func readSpill() {
        guard self.state == .connected, var spill = self.spill, !spill.reading, spill.buffer.count < self.fleet.maxInFlight, let journal = self.journal
        else { return }
        spill.reading = true
        self.spill = spill
        let options = Journal.LineOptions(inlineJSON: false, filter: nil, raw: true)
        journal.read(spill.cursor, maxMessages: self.fleet.maxInFlight, maxBytes: 1 << 20, options: options).assumeIsolated().whenComplete { result in
            guard var spill = self.spill else { return }
            spill.reading = false
            guard case .success(let chunk) = result else {
                // The reader stopped: the daemon is stopping.
                self.spill = spill
                return
            }
            for item in chunk.items {
                switch item {
                case .raw(let seq, let message):
                    spill.buffer.append(Pending(seq: seq, previous: spill.previous, message: message))
                    spill.previous = seq
                case .gap(let gap):
                    // Not in the journal (its retention, a damaged record): given up.
                    let count = Int((gap.to ?? gap.next - 1) - (gap.from ?? gap.next - 1) + 1)
                    spill.previous = nil
                    if let from = gap.from, let to = gap.to { self.skipped[from] = to }
                    self.giveUp(gap.from ?? gap.next, max(count, 0), why: "the journal no longer has it (\(gap.reason))")
                case .message:
                    break
                }
            }
            spill.cursor = chunk.cursor
            self.spill = spill
            if spill.buffer.isEmpty && spill.cursor.expect > self.numberedThrough {
                // Caught up: what is numbered from now on waits in memory again.
                self.logger.notice("fleet: the messages from the journal are all in flight; new ones wait in memory again")
                self.spill = nil
            } else if chunk.items.isEmpty && chunk.atEnd {
                guard !journal.isStopped else {
                    let from = spill.cursor.expect
                    self.giveUp(from, Int(self.numberedThrough - from + 1), why: "the journal stopped before it wrote them")
                    self.skipped[from] = self.numberedThrough
                    self.spill = nil
                    self.advance()
                    return
                }
                // Numbered, not written yet: the journal's writer is behind by a moment.
                self.spill?.retry = self.eventLoop.assumeIsolated().scheduleTask(in: .milliseconds(20)) { self.readSpill() }
                return
            }
            self.advance()
            self.pump()
        }
    }
}
