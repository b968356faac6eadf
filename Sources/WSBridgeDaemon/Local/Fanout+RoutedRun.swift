import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// Messages routed one after another to the same several local clients (a subscription's
/// holders): each message's line is written once for all of them that know it by the same id,
/// and the run goes to each of them as one batch when it ends, the bytes shared, as a broadcast
/// flush's go to every subscriber. Routing a message to 100 holders costs about what routing it
/// to one does.
///
/// A run holds consecutive seqs: it ends (is queued to its clients) when any other line is
/// numbered, so every client's lines keep the stream's order. Per-client routed lines
/// (`RoutedLines`) and a run are never open at once: opening a run sends the first, numbering a
/// per-client line ends the second.
struct RoutedRun {
    /// The holders the run is for. A copy of the session's array is kept: while it is, the
    /// session's array has the same storage only if it is unchanged (changing it copies).
    private(set) var holders: [AppProtocolSessionHolder] = []
    /// One per id the holders know the message by, in the order first met.
    var variants: [Variant] = []
    /// The first line's seq, and the lines each variant has.
    private(set) var seq: UInt64 = 0
    private(set) var count = 0

    struct Variant {
        /// The id its clients know (nil: the message's own bytes, unchanged).
        let id: WireID?
        var clients: [LocalClient]
        var lines: ByteBuffer
        var ends: [Int] = []
    }

    var isOpen: Bool { !self.variants.isEmpty }
    /// The seq the next line of the run must have.
    var next: UInt64 { self.seq + UInt64(self.count) }

    /// Whether `holders` are the run's (the same storage: the same holders, unchanged).
    func isFor(_ holders: [AppProtocolSessionHolder]) -> Bool {
        holders.count == self.holders.count
            && holders.withUnsafeBufferPointer { a in self.holders.withUnsafeBufferPointer { b in a.baseAddress == b.baseAddress } }
    }

    mutating func open(_ holders: [AppProtocolSessionHolder], variants: [Variant], seq: UInt64) {
        self.holders = holders
        self.variants = variants
        self.seq = seq
        self.count = 0
    }

    /// The run's batches (`LineBatch.kept`), one per variant with its clients; the run is closed.
    mutating func close(allocator: ByteBufferAllocator) -> [(LineBatch, [LocalClient])] {
        defer {
            self.holders = []
            self.variants = []
            self.count = 0
        }
        return self.variants.map { (LineBatch.kept($0.lines, seq: self.seq, ends: $0.ends, allocator: allocator), $0.clients) }
    }

    mutating func lineWritten() { self.count += 1 }
}

extension Fanout {
    /// Delivers a message for `holders` (more than one) as a line of a run: written once for
    /// each id its holders know it by (`id`: nil for the message's own, whose bytes are at
    /// `idAt` in `data`; `spelling` writes an id as the wire does), the run's batch going to
    /// each of them once it ends. False (nothing done) when they cannot share one (a fleet
    /// follower's app among them, or one app twice): then each is sent its own.
    func deliverInRun(
        _ holders: [AppProtocolSessionHolder], data: ByteBuffer, idAt: Range<Int>, receivedAtMillis: Int64,
        id: (AppProtocolSessionHolder) -> WireID?, spelling: (WireID) -> ByteBuffer
    ) -> Bool {
        guard let seq = self.continueRun(for: holders) ?? self.openRun(for: holders, id: id) else { return false }
        for i in self.run.variants.indices {
            let splicing = self.run.variants[i].id.map { IDSplice(at: idAt, text: spelling($0)) }
            self.writeRunLine(i, seq: seq, data: data, splicing: splicing, receivedAtMillis: receivedAtMillis)
        }
        self.run.lineWritten()
        return true
    }

    /// Whether a message for `holders` (more than one) joins the open run: the same holders as
    /// the run's, and no other line numbered since. Then its seq is taken.
    private func continueRun(for holders: [AppProtocolSessionHolder]) -> UInt64? {
        guard self.run.isOpen, self.run.next == self.seq + 1, self.run.isFor(holders) else { return nil }
        return self.takeSeqInRun()
    }

    /// Opens a run for `holders`, each a local client (by `id` for each, the id it knows the
    /// message by): nil when one is not a local client (a fleet follower's app), or one client
    /// holds it twice (it gets two seqs: routed one by one). Everything numbered before goes
    /// first. Returns the first line's seq.
    private func openRun(for holders: [AppProtocolSessionHolder], id: (AppProtocolSessionHolder) -> WireID?) -> UInt64? {
        var variants: [RoutedRun.Variant] = []
        var apps = Set<AppID>(minimumCapacity: holders.count)
        for holder in holders {
            guard let client = self.client(holder.app), apps.insert(holder.app).inserted else { return nil }
            let known = id(holder)
            if let i = variants.firstIndex(where: { $0.id == known }) {
                variants[i].clients.append(client)
            } else {
                variants.append(RoutedRun.Variant(id: known, clients: [client], lines: self.allocator.buffer(capacity: 4096)))
            }
        }
        self.flush()
        let seq = self.takeSeq()
        self.run.open(holders, variants: variants, seq: seq)
        // Should no read end come, the loop's next turn sends it.
        self.eventLoop.assumeIsolated().execute { self.flush() }
        return seq
    }

    /// Writes the open run's line `seq` for variant `i`: `data` as its clients get it.
    private func writeRunLine(_ i: Int, seq: UInt64, data: ByteBuffer, splicing: IDSplice? = nil, receivedAtMillis: Int64) {
        if let splicing {
            MessageLineEncoder.write(
                seq: seq, text: data, receivedAtMillis: receivedAtMillis, splicing: splicing.at, with: splicing.text, into: &self.run.variants[i].lines,
                ts: &self.tsDigits)
        } else {
            let message = UpstreamMessage(kind: .text, data: data, receivedAtMillis: receivedAtMillis)
            MessageLineEncoder.write(
                seq: seq, message, inlineJSON: self.configuration.inlineJSON, parsed: nil, into: &self.run.variants[i].lines, ts: &self.tsDigits)
        }
        self.run.variants[i].ends.append(self.run.variants[i].lines.writerIndex - self.run.variants[i].lines.readerIndex)
    }

    /// Ends the open run: each of its clients gets its variant's lines, one batch (written now
    /// at the end of a read, `now`; else queued, written with the rest of the loop's turn).
    func closeRun(now: Bool) {
        for (batch, clients) in self.run.close(allocator: self.allocator) {
            for client in clients {
                if now { client.deliver(batch) } else { client.queue(batch) }
            }
        }
    }
}
