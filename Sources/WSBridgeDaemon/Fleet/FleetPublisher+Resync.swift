import CNATS
import DequeModule
import Logging
import NIOCore
import NIOPosix
import WSBridgeCore

/// Where the stream stands (docs/fleet.md, "The publisher never wedges"). Each message expects its
/// predecessor to be the stream's last (`Nats-Expected-Last-Msg-Id`), so a refused one stops the
/// ones after it and nothing lands out of order. What made a publish fail may stay: another
/// publisher's message last, a takeover, a purged stream, or a server that lost the last id in a
/// restart (nats-server 2.9 then says "wrong last msg ID: " with none). So after a refusal, and
/// after every reconnect, nothing more goes until the flight has its answers; then the stream's
/// last message is read: what of this bridge's it shows stored is taken as acknowledged, and the
/// first message still waiting goes expecting nothing (its id makes a second copy harmless within
/// the duplicate window), the rest chained to it again. In order, nothing twice, and never stuck on
/// an expectation the stream cannot meet.
extension FleetPublisher {
    /// A cold standby publishes only while it leads, its lease written since NATS last came back:
    /// a bridge that lost its lease while away puts nothing after the new leader's takeover. (Hot
    /// bridges all publish: the ids make the copies one.)
    var mayPublish: Bool {
        guard let lease = self.lease, self.idPaths == nil else { return true }
        return lease.confirmedLeading
    }

    /// Another bridge leads now: what this one still holds never goes (it would land after the
    /// other's takeover, out of order); the followers' gap line names where the stream stopped.
    func standDown(for holder: String) {
        var held = self.waiting.count + (self.spill?.buffer.count ?? 0)
        var first: UInt64?
        for pending in self.waiting {
            first = first ?? pending.seq
            self.acknowledgedAhead.insert(pending.seq)
        }
        for pending in self.spill?.buffer ?? [] {
            first = first ?? pending.seq
            self.acknowledgedAhead.insert(pending.seq)
        }
        if let spill = self.spill, spill.cursor.expect <= self.numberedThrough {
            // Still in the journal, not read yet: given up too.
            first = first ?? spill.cursor.expect
            held += Int(self.numberedThrough - spill.cursor.expect + 1)
            self.skipped[spill.cursor.expect] = self.numberedThrough
        }
        self.spill?.retry?.cancel()
        self.spill = nil
        self.nextNumber = nil
        self.waiting.removeAll()
        self.waitingBytes = 0
        if let first {
            self.lost += held
            self.logger.error(
                "fleet: \(held) message(s) from seq \(first) never went into the stream: \(holder) took the lease over meanwhile, and its feed goes on after its takeover (this bridge's own subscribers had them)"
            )
        }
        self.advance()
    }

    /// Resyncs once nothing is in flight (a refusal's later ones come back refused too).
    func resyncWhenLanded() {
        guard self.resyncing, self.inFlight.isEmpty, !self.resyncReading, self.state == .connected, let jetStream = self.jetStream else { return }
        self.resyncReading = true
        let library = self.library
        let stream = self.fleet.stream
        let handle = UnsafeSendable(jetStream)
        NIOThreadPool.singleton.runIfActive(eventLoop: self.eventLoop) { () throws -> StreamEnd in
            try Self.streamEnd(library, handle.value, stream)
        }.assumeIsolated().whenComplete { result in
            self.resyncReading = false
            guard self.resyncing, self.state == .connected else { return }
            switch result {
            case .failure(let error):
                if self.lastError != "\(error)" { self.logger.warning("fleet: \(error); trying again in a second") }
                self.lastError = "\(error)"
                self.retryLater(.seconds(1)) { self.resyncWhenLanded() }
            case .success(let end):
                self.resume(after: end)
            }
        }
    }

    /// The stream's last message: its stream seq and `Nats-Msg-Id` (nil: none, or the stream is
    /// empty or purged).
    struct StreamEnd {
        var seq: UInt64
        var id: String?
        /// The last number of the last numbered message among the last `FleetBatch.lookBack`
        /// (nil: none there: a stream no bridge batches, or empty).
        var numbered: UInt64? = nil
    }

    /// Reads the stream's last message and the last number given, looking back from it (blocks:
    /// on the thread pool).
    static func streamEnd(_ library: NATSLibrary, _ jetStream: OpaquePointer, _ stream: String) throws -> StreamEnd {
        let api = library.api
        var info: UnsafeMutablePointer<jsStreamInfo>?
        var code = jsErrCode(rawValue: 0)
        let status = api.js_GetStreamInfo(&info, jetStream, stream, nil, &code)
        guard status == NATS_OK, let info else { throw FleetError("reading where the stream \(stream) stands: \(library.text(status))") }
        let last = info.pointee.State.LastSeq
        let count = info.pointee.State.Msgs
        api.jsStreamInfo_Destroy(info)
        guard last > 0, count > 0 else { return StreamEnd(seq: last, id: nil) }
        var message: OpaquePointer?
        let read = api.js_GetMsg(&message, jetStream, stream, last, nil, &code)
        defer { if let message { api.natsMsg_Destroy(message) } }
        if read == NATS_NOT_FOUND || code == jsErrCode(rawValue: 10037) { return StreamEnd(seq: last, id: nil) }
        guard read == NATS_OK, let message else { throw FleetError("reading the stream \(stream)'s last message: \(library.text(read))") }
        var end = StreamEnd(seq: last, id: library.header("Nats-Msg-Id", of: message))
        end.numbered = try library.lastNumber(jetStream, stream, from: last, first: message)
        return end
    }

    /// Goes on after the stream's last message: this bridge's messages up to it are stored, the
    /// next goes expecting nothing.
    private func resume(after end: StreamEnd) {
        self.resyncing = false
        var unnumbered: String?
        if !self.numbering, end.numbered != nil {
            if self.idPaths == nil {
                self.numbering = true
                self.logger.notice(
                    "fleet: the stream \(self.fleet.stream)'s messages are numbered (a bridge with fleet.batch published into it): this bridge numbers its messages too, so that followers take them"
                )
            } else {
                unnumbered =
                    "the stream \(self.fleet.stream)'s messages are numbered (a bridge with fleet.batch published into it), and hot bridges cannot number theirs alike: followers drop what this bridge publishes; give the hot bridges a new stream (docs/fleet.md, \"Batches\")"
            }
        }
        if self.numbering {
            self.nextNumber = FleetBatch.next(lastSeq: end.seq, numbered: end.numbered, known: self.numberedThroughAcknowledged)
            self.expectSeq = end.seq
        }
        let prefix = "\(self.feed)-"
        let ours = end.id.flatMap { $0.hasPrefix(prefix) ? UInt64($0.dropFirst(prefix.count)) : nil }
        var stored = 0
        if let ours {
            while let first = self.waiting.first, first.seq <= ours {
                self.waiting.removeFirst()
                self.waitingBytes -= first.message.data.readableBytes
                self.acknowledgedAhead.insert(first.seq)
                stored += 1
            }
            while let first = self.spill?.buffer.first, first.seq <= ours {
                self.spill?.buffer.removeFirst()
                self.acknowledgedAhead.insert(first.seq)
                stored += 1
            }
            self.acknowledged += stored
        }
        if !self.waiting.isEmpty {
            self.waiting[self.waiting.startIndex].previous = nil
        } else if var spill = self.spill {
            self.spill = nil
            if spill.buffer.isEmpty { spill.previous = nil } else { spill.buffer[spill.buffer.startIndex].previous = nil }
            self.spill = spill
        } else {
            self.unchainNext = true
        }
        let last =
            if let ours { "this bridge's seq \(ours)" } else if let id = end.id { "another publisher's (\(id))" } else { "none (empty or purged)" }
        self.logger.notice(
            "fleet: the stream \(self.fleet.stream) stands at stream seq \(end.seq), its last message \(last)\(stored > 0 ? ", \(stored) waiting one(s) already in it" : ""): publishing on from there\(self.nextNumber.map { ", the next message numbered \($0)" } ?? "")"
        )
        if let unnumbered, self.lastError != unnumbered { self.logger.error("fleet: \(unnumbered)") }
        self.lastError = unnumbered
        self.advance()
        self.pump()
    }
}
