import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// A client's routed lines not yet sent: one buffer, written one after another as they are
/// numbered (consecutive seqs), sent as one batch at the end of the read that brought them (as
/// broadcast lines are), not queued one by one.
struct RoutedLines {
    var lines = ByteBuffer()
    var ends: [Int] = []
    /// The first line's seq.
    var seq: UInt64 = 0
    /// The seq of the last line routed to the client (kept from batch to batch).
    var lastSeq: UInt64 = 0

    var isEmpty: Bool { self.ends.isEmpty }
    /// The seq a line must have to join the batch (a batch's seqs are consecutive).
    var next: UInt64 { self.seq + UInt64(self.ends.count) }

    /// A new batch from `seq`, in `lines`.
    mutating func start(_ seq: UInt64, in lines: ByteBuffer) {
        self.lines = lines
        self.seq = seq
    }
}

/// A routed message's id written as another (`Fanout.deliver(_:data:splicing:…)`): the bytes at
/// `at` in the message's readable bytes are written as `text`. Only where nothing needs the
/// message's view (no `inline_json`: the protocol layer scans only then).
struct IDSplice {
    var at: Range<Int>
    var text: ByteBuffer
}

extension Fanout {
    /// A message for one app (the protocol layer's routing): numbered in the stream, after the
    /// lines already numbered, but for no one else, nor the replay ring or the journal. It goes
    /// out with the client's other routed lines of this read (`flushRouted`), before any later
    /// broadcast line.
    /// `shared`: the seq of one upstream message routed to several holders, each under it (one
    /// seq for one message, as a broadcast has); a client that holds it twice gets a seq of its
    /// own for its second copy (even when a fleet follower's delivery between sent its batch).
    /// `splicing`: the bytes of `data` at `at` written as `text` (the id the client's app knows).
    func deliver(
        _ json: JSONValue?, data: ByteBuffer, splicing: IDSplice? = nil, to client: LocalClient, receivedAtMillis: Int64, shared: UInt64? = nil
    ) {
        // The broadcast lines numbered before it go first.
        if self.hasUnsentLines { self.flush() }
        let seq = shared.flatMap { client.routed.lastSeq == $0 ? nil : $0 } ?? self.takeSeq()
        // Room for a line of this message (its payload, some escapes, the line's fields).
        let room = min(64 << 10, data.readableBytes + data.readableBytes / 8 + 96)
        if client.routed.isEmpty {
            if self.routedClients.isEmpty {
                // Should no read end come (a message from elsewhere than a socket read), the
                // loop's next turn sends it.
                self.eventLoop.assumeIsolated().execute { self.flush() }
            }
            self.routedClients.append(client)
            client.routed.start(seq, in: self.allocator.buffer(capacity: room))
        } else if client.routed.next != seq {
            // A message for others came between: this batch is done (queued, written with the
            // rest at the end of the loop's turn), the next starts here.
            client.queue(self.batch(&client.routed))
            client.routed.start(seq, in: self.allocator.buffer(capacity: room))
        }
        if let splicing {
            MessageLineEncoder.write(
                seq: seq, text: data, receivedAtMillis: receivedAtMillis, splicing: splicing.at, with: splicing.text, into: &client.routed.lines,
                ts: &self.tsDigits)
        } else {
            let message = UpstreamMessage(kind: .text, data: data, receivedAtMillis: receivedAtMillis)
            MessageLineEncoder.write(seq: seq, message, inlineJSON: self.configuration.inlineJSON, parsed: json, into: &client.routed.lines, ts: &self.tsDigits)
        }
        client.routed.ends.append(client.routed.lines.writerIndex - client.routed.lines.readerIndex)
        client.routed.lastSeq = seq
    }

    /// A message the protocol layer routed to one app or answered itself, as the wire brought it,
    /// for the subscribers that see everything.
    func tapWire(_ message: UpstreamMessage, parsed: JSONValue?) {
        self.flush()
        let seq = self.takeSeq()
        let line = MessageLineEncoder.message(seq: seq, message, inlineJSON: self.configuration.inlineJSON, parsed: parsed, allocator: self.allocator)
        for client in self.wireTaps {
            // Its filter selects on the view too (`tail --all --filter subject=…`).
            if let filter = client.filter, !filter.matches(json: parsed, text: message.data.readableBytesView) { continue }
            client.deliver(line, seq: seq)
        }
    }

    /// The seq of a message routed to several holders (the broadcast lines numbered before it
    /// sent first: a flush numbers them back from the last seq).
    func takeRoutedSeq() -> UInt64 {
        if self.hasUnsentLines { self.flush() }
        return self.takeSeq()
    }

    /// Sends each client's routed lines.
    func flushRouted() {
        let clients = self.routedClients
        self.routedClients.removeAll(keepingCapacity: true)
        for client in clients where !client.routed.isEmpty {
            client.deliver(self.batch(&client.routed))
        }
    }

    /// The lines as a batch (`LineBatch.kept`), `routed` emptied.
    private func batch(_ routed: inout RoutedLines) -> LineBatch {
        let batch = LineBatch.kept(routed.lines, seq: routed.seq, ends: routed.ends, allocator: self.allocator)
        routed.lines = ByteBuffer()
        routed.ends = []
        return batch
    }
}
