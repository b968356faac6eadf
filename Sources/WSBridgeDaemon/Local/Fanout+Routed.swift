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
    /// The seq the next line must have to join the batch (a batch's seqs are consecutive).
    var next: UInt64 = 0

    var isEmpty: Bool { self.ends.isEmpty }
}

extension Fanout {
    /// A message for one app (the protocol layer's routing): numbered in the stream, after the
    /// lines already numbered, but for no one else, nor the replay ring or the journal. It goes
    /// out with the client's other routed lines of this read (`flushRouted`), before any later
    /// broadcast line.
    /// `shared`: the seq of one upstream message routed to several holders, each under it (one
    /// seq for one message, as a broadcast has); a client that holds it twice gets a seq of its
    /// own for its second copy.
    func deliver(_ json: JSONValue?, data: ByteBuffer, to client: LocalClient, receivedAtMillis: Int64, shared: UInt64? = nil) {
        // The broadcast lines numbered before it go first.
        if self.hasUnsentLines { self.flush() }
        let seq = shared.flatMap { client.routed.next == $0 + 1 && !client.routed.isEmpty ? nil : $0 } ?? self.takeSeq()
        if client.routed.isEmpty {
            if self.routedClients.isEmpty {
                // Should no read end come (a message from elsewhere than a socket read), the
                // loop's next turn sends it.
                self.eventLoop.assumeIsolated().execute { self.flush() }
            }
            self.routedClients.append(client)
            client.routed.lines = self.allocator.buffer(capacity: min(64 << 10, 2 * (data.readableBytes + 64)))
            client.routed.seq = seq
        } else if client.routed.next != seq {
            // A message for others came between: this batch is done (queued, written with the
            // rest at the end of the loop's turn), the next starts here.
            client.queue(self.batch(&client.routed))
            client.routed.lines = self.allocator.buffer(capacity: 2 * (data.readableBytes + 64))
            client.routed.seq = seq
        }
        let message = UpstreamMessage(kind: .text, data: data, receivedAtMillis: receivedAtMillis)
        MessageLineEncoder.write(seq: seq, message, inlineJSON: self.configuration.inlineJSON, parsed: json, into: &client.routed.lines, ts: &self.tsDigits)
        client.routed.ends.append(client.routed.lines.writerIndex - client.routed.lines.readerIndex)
        client.routed.next = seq + 1
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

    /// The lines as a batch, `routed` emptied. A buffer more than half unused is replaced by one
    /// of the lines' size (a queue that keeps them counts only their bytes).
    private func batch(_ routed: inout RoutedLines) -> LineBatch {
        var lines = routed.lines
        if lines.capacity > 2 * lines.readableBytes { lines = self.allocator.buffer(buffer: lines) }
        let batch = LineBatch(lines: lines, seq: routed.seq, ends: routed.ends)
        routed = RoutedLines()
        return batch
    }
}
