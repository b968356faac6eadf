import CNATS
import DequeModule
import NIOCore
import WSBridgeCore

/// `fleet.batch` > 1 (docs/fleet.md, "Batches"): what waits when the publisher hands messages to
/// the client goes as few messages of the stream, each up to `fleet.batch` messages (and
/// `Configuration.Fleet.batchMaxBytes`) of one subject, none of them for one follower's app (that
/// one goes alone). A batch is stored once under the id of its last message (`STREAM-SEQ`),
/// expects the id of the message before its first to be the stream's last, as a message alone
/// does, and goes again as it went (the same messages under the same id) when it failed. Its
/// headers number its messages for the followers: `Wsbridge-Number` (the first's) and
/// `Wsbridge-Batch` (how many), numbers going on from the last the stream has, read with where it
/// stands (FleetPublisher+Resync.swift) before the first batch, which expects that stream seq to
/// be the last: nothing lands between the read and it.
extension FleetPublisher {
    static let numberHeader = "Wsbridge-Number"
    static let batchHeader = "Wsbridge-Batch"

    /// Hands the next batch to the client: false when nothing more goes now.
    func handBatch(_ jetStream: OpaquePointer) -> Bool {
        guard let number = self.nextNumber else {
            // Read where the stream stands first (once the flight has landed).
            if !self.waiting.isEmpty || !(self.spill?.buffer.isEmpty ?? true) {
                self.resyncing = true
                self.resyncWhenLanded()
            }
            return false
        }
        let fromWaiting = !self.waiting.isEmpty
        let members = fromWaiting ? self.nextBatch(in: self.waiting) : self.nextBatch(in: self.spill?.buffer ?? [])
        guard let first = members.first, let last = members.last else { return false }
        let api = self.library.api
        let count = UInt64(members.count)
        var msg: OpaquePointer?
        let subject = first.message.data.withUnsafeReadableBytes { self.template?.subject(for: $0) } ?? self.fleet.subject
        let made: natsStatus
        if members.count == 1 {
            made = first.message.data.withUnsafeReadableBytes { bytes in
                api.natsMsg_Create(&msg, subject, nil, bytes.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(bytes.count))
            }
        } else {
            self.batchBytes.removeAll(keepingCapacity: true)
            for member in members {
                member.message.data.withUnsafeReadableBytes { FleetBatch.append(binary: member.message.kind == .binary, $0, to: &self.batchBytes) }
            }
            made = self.batchBytes.withUnsafeBytes { bytes in
                api.natsMsg_Create(&msg, subject, nil, bytes.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(bytes.count))
            }
        }
        guard made == NATS_OK, let msg else {
            self.failed("a message for NATS: \(self.library.text(made))")
            return false
        }
        _ = api.natsMsgHeader_Set(msg, Self.seqHeader, "\(last.seq)")
        _ = api.natsMsgHeader_Set(msg, Self.streamHeader, self.feed)
        _ = api.natsMsgHeader_Set(msg, Self.numberHeader, "\(number)")
        if members.count > 1 {
            _ = api.natsMsgHeader_Set(msg, Self.batchHeader, "\(members.count)")
        } else {
            if first.message.kind == .binary { _ = api.natsMsgHeader_Set(msg, Self.kindHeader, "binary") }
            if let to = first.to { _ = api.natsMsgHeader_Set(msg, Self.toHeader, to) }
        }
        let id = "\(self.feed)-\(last.seq)"
        let status = self.hand(msg, to: jetStream, id: id, previous: first.previous.map { "\(self.feed)-\($0)" }, expectSeq: self.expectSeq)
        guard status == NATS_OK else {
            self.failed("publishing: \(self.library.text(status))")
            return false
        }
        self.lastHanded = (last.seq, id)
        self.expectSeq = nil
        self.nextNumber = number + count
        var flight = members
        for index in flight.indices { flight[index].batchEnd = last.seq }
        flight[flight.count - 1].numberAfter = number + count
        if fromWaiting {
            self.waiting.removeFirst(members.count)
            for member in members { self.waitingBytes -= member.message.data.readableBytes }
        } else {
            self.spill?.buffer.removeFirst(members.count)
        }
        self.inFlight[last.seq] = flight[flight.count - 1]
        if flight.count > 1 { self.batches[last.seq] = flight }
        return true
    }

    /// Hands `msg` to the client, which owns it from then on (destroyed here when it was not
    /// taken): stored once under `id`, expecting `previous` (an id) and `expectSeq` to be the
    /// stream's last, answered within `fleet.ack_timeout`.
    func hand(_ msg: OpaquePointer, to jetStream: OpaquePointer, id: String, previous: String?, expectSeq: UInt64? = nil) -> natsStatus {
        var options = jsPubOptions()
        options.MaxWait = self.ackTimeout
        if expectSeq == 0 {
            // An empty stream (the client sends no expectation of 0; JetStream reads the header).
            _ = self.library.api.natsMsgHeader_Set(msg, "Nats-Expected-Last-Sequence", "0")
        } else if let expectSeq {
            options.ExpectLastSeq = expectSeq
        }
        var owned: OpaquePointer? = msg
        let status = id.withCString { id in
            options.MsgId = id
            return Self.withOptionalCString(previous) { previous in
                options.ExpectLastMsgId = previous
                return self.library.api.js_PublishMsgAsync(jetStream, &owned, &options)
            }
        }
        if let owned { self.library.api.natsMsg_Destroy(owned) }
        return status
    }

    /// The messages at the front of `queue` that go as one (FleetBatch.count).
    private func nextBatch(in queue: Deque<Pending>) -> [Pending] {
        let subject: ((Pending) -> String?)? = self.template.map { template in
            { pending in pending.message.data.withUnsafeReadableBytes { template.subject(for: $0) } }
        }
        let count = FleetBatch.count(of: queue, max: self.fleet.batch, maxBytes: Configuration.Fleet.batchMaxBytes, subject: subject)
        return Array(queue.prefix(count))
    }
}

extension FleetPublisher.Pending: FleetBatchCandidate {
    var byteCount: Int { self.message.data.readableBytes }
    var alone: Bool { self.to != nil }
    var wentIn: UInt64? { self.batchEnd }
}
