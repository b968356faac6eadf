import NIOCore
import WSBridgeCore
import WSBridgeProtocol

extension Fanout {
    // MARK: - Replay

    /// The stream's id: the one given (a fleet follower's), else the journal's, else a new one.
    static func stream(given: String?, journal: Journal?) -> String { given ?? journal?.streamID ?? Self.newStreamID() }

    /// A stream id: 16 hex digits, random.
    static func newStreamID() -> String {
        let hex = String(UInt64.random(in: .min ... .max), radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }

    /// Resends buffered messages after `since` (in `stream`, when the consumer said). What is no
    /// longer buffered is reported as a `not_buffered` gap; a `since` from an earlier stream as
    /// a `restarted` gap, then this stream from its start (as far as still buffered).
    func replay(to client: LocalClient, since: UInt64, stream: String?) {
        self.flush()
        var since = since
        if let journal = self.journal, let stream, stream != self.stream, let earlier = journal.earlierStream(stream) {
            // A stream the journal held before a crash: from where its durable part ended.
            if since >= earlier.end {
                let gap = journal.notDurableAtRestart(after: earlier.end, in: earlier.stream, next: earlier.next, since: since)
                client.send(MessageLineEncoder.line(gap.json, allocator: self.allocator))
                since = earlier.end
            }
            self.replayFromJournal(client, after: since)
            return
        }
        let oldest = self.ring.oldestSeq ?? (self.seq + 1)
        if GapLine.isRestart(since: since, stream: stream, current: self.stream, last: self.seq) {
            // Without the consumer's stream, all that is known is that this one has no such seq.
            let message =
                stream.map {
                    "wsbridged restarted: seq \(since) was counted in stream \($0), and this daemon's stream \(self.stream) began again at seq 1; what followed seq \(since) there is lost, and delivery goes on from this stream's start"
                }
                ?? "stream \(self.stream) has no seq \(since) yet (its last is \(self.seq)): wsbridged restarted since that seq was read, or it is wrong (subscribe with \"stream\" too to tell which); delivery goes on from this stream's start"
            let gap = GapLine(stream: self.stream, reason: GapLine.restarted, next: min(oldest, self.seq + 1), since: since, message: message)
            client.send(MessageLineEncoder.line(gap.json, allocator: self.allocator))
            since = 0
        }
        guard since < self.seq else { return }
        if self.journal != nil && since + 1 < oldest {
            self.replayFromJournal(client, after: since)
            return
        }
        if since + 1 < oldest {
            let gap = GapLine(
                stream: self.stream, reason: GapLine.notBuffered, from: since + 1, to: oldest - 1, next: oldest,
                message:
                    "no longer buffered: the replay ring keeps the last \(self.configuration.replay) messages (local.replay) up to \(self.configuration.replayBytes) bytes (local.replay_bytes)"
            )
            client.send(MessageLineEncoder.line(gap.json, allocator: self.allocator))
        }
        for entry in self.ring.entries where entry.seq > since {
            let line = self.ringLine(entry)
            if let filter = client.filter {
                guard Self.payload(ofLine: line, matches: filter) else { continue }
            }
            client.deliver(line, seq: entry.seq)
        }
    }

    /// Whether the payload of an encoded message line matches `filter` (replayed messages).
    static func payload(ofLine line: ByteBuffer, matches filter: Filter) -> Bool {
        guard let json = try? JSONValue.parse(line.readableBytesView), let message = MessageLine(json: json), message.kind == .text else { return false }
        if let inline = message.inlineJSON { return filter.matches(json: inline, text: inline.serialized.utf8) }
        guard let text = message.data else { return false }
        return filter.matches(json: try? JSONValue.parse(text), text: text.utf8)
    }
}
