import Logging
import NIOCore
import WSBridgeCore

#if canImport(Glibc)
    import Glibc
#endif

/// The journal's policy on the durable log (`LogWriter`): records encoded and appended in one
/// write per batch (split where a segment fills), the fdatasync the policy asks for, segments
/// rolled and old ones removed (retention).
struct JournalWriter: LogPolicy {
    typealias Op = Journal.Op
    typealias Segment = Journal.Segment

    let configuration: Configuration.Journal
    private(set) var directory: LogDirectory
    let stream: UInt64
    let eventLoop: any EventLoop
    let logger: Logger
    /// The segment written to.
    private var fd: CInt
    /// Oldest first; the last is the one written to.
    private(set) var segments: [Segment]
    private var dirty = false
    /// Seqs that could not be written, to record as a hole before the next messages.
    private var unwritten: (from: UInt64, to: UInt64)?
    /// When a write failed: until `retryDelay` later, messages only extend the hole.
    private var stoppedAt: NIODeadline?
    private var stopReason: String?

    init(
        configuration: Configuration.Journal, directory: LogDirectory, stream: UInt64, fd: CInt, segments: [Segment], eventLoop: any EventLoop,
        logger: Logger
    ) {
        self.configuration = configuration
        self.directory = directory
        self.stream = stream
        self.fd = fd
        self.segments = segments
        self.eventLoop = eventLoop
        self.logger = logger
    }

    static var sync: Op { .sync }

    struct Outcome {
        var bytesTaken = 0
        var fsyncs: UInt64 = 0
        var wrote = false
        /// Why writing stopped (a failed write or fdatasync).
        var failure: String?
        var closed = false
        var promises: [EventLoopPromise<Void>] = []
    }

    mutating func write(_ ops: [Op]) -> LogBatch<Journal.Shared> {
        let out = self.process(ops)
        let (segments, eventLoop) = (self.segments, self.eventLoop)
        let last = out.wrote ? segments.last?.lastSeq : nil
        return LogBatch(
            apply: { s in
                s.pendingBytes -= out.bytesTaken
                s.segments = segments
                s.fsyncs += out.fsyncs
                if let failure = out.failure {
                    s.stopped = (failure, .now())
                } else if out.wrote {
                    s.stopped = nil
                }
                let handler = s.onWritten
                return {
                    if let handler, let last { eventLoop.execute { handler(last) } }
                    for promise in out.promises { promise.succeed(()) }
                }
            }, syncDue: self.dirty && !out.closed && out.failure == nil, closed: out.closed)
    }

    private mutating func process(_ ops: [Op]) -> Outcome {
        var out = Outcome()
        var batch = ByteBuffer()
        var syncAsked = false
        var close: (lastSeq: UInt64, promise: EventLoopPromise<Void>)?
        var skipped = false
        let now = WallClock.millisecondsSinceEpoch()
        for op in ops {
            switch op {
            case .entries(let entries, let bytes):
                out.bytesTaken += bytes
                guard self.fd >= 0, let first = entries.first?.seq, let last = entries.last?.seq else { continue }
                if let at = self.stoppedAt, NIODeadline.now() < at + Journal.retryDelay {
                    // Stopped: not even tried (a full disk stays full for a while).
                    self.unwritten = (self.unwritten?.from ?? first, last)
                    skipped = true
                    continue
                }
                if let hole = self.unwritten {
                    self.encodeHole(from: hole.from, to: max(hole.to, first - 1), now, &batch, &out)
                    self.unwritten = nil
                }
                for e in entries {
                    let m = e.message
                    self.makeRoom(for: JournalFormat.recordOverhead + m.data.readableBytes, firstSeq: e.seq, now, &batch, &out)
                    JournalFormat.write(kind: m.kind == .binary ? .binary : .text, seq: e.seq, millis: m.receivedAtMillis, payload: m.data, into: &batch)
                    self.segments[self.segments.count - 1].lastSeq = e.seq
                    self.segments[self.segments.count - 1].lastMillis = m.receivedAtMillis
                }
            case .hole(let from, let to):
                self.unwritten = (self.unwritten?.from ?? from, to)
            case .sync:
                syncAsked = true
            case .close(let lastSeq, let promise):
                close = (lastSeq, promise)
            case .barrier(let promise):
                out.promises.append(promise)
            }
        }
        if let close, self.fd >= 0 {
            // What the fan-out numbered and never handed over (or could not be written) is a
            // hole; then the clean stop.
            let written = self.segments.last?.lastSeq ?? 0
            if let hole = self.unwritten {
                self.encodeHole(from: hole.from, to: max(hole.to, close.lastSeq), now, &batch, &out)
                self.unwritten = nil
            } else if close.lastSeq > written {
                self.encodeHole(from: written + 1, to: close.lastSeq, now, &batch, &out)
            }
            JournalFormat.write(kind: .closed, seq: close.lastSeq, millis: now, payload: nil, into: &batch)
        }
        self.flush(&batch, &out)
        if self.fd >= 0, self.dirty, out.failure == nil, syncAsked || close != nil || self.configuration.fsync == .always {
            self.syncSegment(&out)
        }
        if syncAsked { self.applyRetention(now: now) }
        if skipped, out.failure == nil, !out.wrote { out.failure = self.stopReason }
        if let close {
            if self.fd >= 0 {
                Glibc.close(self.fd)
                self.directory.unlock()
                self.fd = -1
            }
            out.closed = true
            out.promises.append(close.promise)
        }
        return out
    }

    private mutating func encodeHole(from: UInt64, to: UInt64, _ now: Int64, _ batch: inout ByteBuffer, _ out: inout Outcome) {
        guard from <= to else { return }
        self.makeRoom(for: JournalFormat.recordOverhead + 8, firstSeq: from, now, &batch, &out)
        JournalFormat.writeHole(from: from, to: to, millis: now, into: &batch)
        self.segments[self.segments.count - 1].lastSeq = to
        self.segments[self.segments.count - 1].lastMillis = now
    }

    /// Rolls to a new segment (its first seq `firstSeq`) when a record of `size` bytes would
    /// take the current one past `segment_bytes` (a segment with no record takes any).
    private mutating func makeRoom(for size: Int, firstSeq: UInt64, _ now: Int64, _ batch: inout ByteBuffer, _ out: inout Outcome) {
        let current = self.segments[self.segments.count - 1]
        let used = current.size + batch.readableBytes
        guard used > JournalFormat.headerSize, used + size > self.configuration.segmentBytes else { return }
        self.flush(&batch, &out)
        guard self.fd >= 0, out.failure == nil else { return }
        if self.dirty { self.syncSegment(&out) }
        let header = JournalFormat.Header(stream: self.stream, firstSeq: firstSeq, createdMillis: now)
        do {
            let fd = try JournalFiles.create(self.directory.path, header)
            Glibc.close(self.fd)
            self.fd = fd
            self.segments.append(
                Segment(firstSeq: firstSeq, stream: self.stream, createdMillis: now, size: JournalFormat.headerSize, lastSeq: firstSeq - 1, lastMillis: now))
            out.fsyncs += 2
            self.applyRetention(now: now)
        } catch {
            self.logger.error("journal: \(error); the segment \(JournalFormat.fileName(firstSeq: current.firstSeq)) goes on past journal.segment_bytes")
        }
    }

    /// Writes the batch at the end of the current segment. A failed write keeps the whole
    /// records that reached the file short of `stopReserve` before where it failed (so the hole
    /// and the clean stop still fit on a full disk) and cuts the rest off; their messages become
    /// a hole, and the journal stops until `retryDelay` passed.
    private mutating func flush(_ batch: inout ByteBuffer, _ out: inout Outcome) {
        guard batch.readableBytes > 0, self.fd >= 0 else { return }
        defer { batch.clear() }
        let index = self.segments.count - 1
        let before = self.segments[index].size
        if out.failure == nil {
            let (written, failure) = DurableFile.write(self.fd, batch, at: before)
            if let failure {
                let kept = Self.wholeRecords(in: batch, upTo: written - Self.stopReserve)
                try? DurableFile.truncate(self.fd, to: before + kept)
                if kept > 0 {
                    self.segments[index].size += kept
                    self.dirty = true
                    out.wrote = true
                    batch.moveReaderIndex(forwardBy: kept)
                }
                self.stop("cannot write \(JournalFiles.path(self.directory.path, firstSeq: self.segments[index].firstSeq)): \(failure)", batch, &out)
                return
            }
        }
        guard out.failure == nil else {
            self.stop(out.failure!, batch, &out)
            return
        }
        self.segments[index].size += batch.readableBytes
        self.dirty = true
        self.stoppedAt = nil
        self.stopReason = nil
        out.wrote = true
    }

    /// The messages in `batch` were not written: they are a hole, recorded before the next
    /// ones that are.
    private mutating func stop(_ reason: String, _ batch: ByteBuffer, _ out: inout Outcome) {
        // The batch's records are in order: its first record's seq starts the hole, and the
        // segment's lastSeq (advanced as they were encoded) ends it.
        let index = self.segments.count - 1
        let first = Self.firstSeq(in: batch) ?? self.segments[index].lastSeq
        let last = self.segments[index].lastSeq
        if out.failure == nil {
            self.logger.error(
                "journal: \(reason); messages from seq \(first) are not journaled (live delivery goes on); trying again in \(Journal.retryDelay.nanoseconds / 1_000_000_000) s: free space in \(self.directory.path)"
            )
        }
        out.failure = reason
        self.stoppedAt = .now()
        self.stopReason = reason
        self.unwritten = (min(self.unwritten?.from ?? first, first), last)
        // The segment's lastSeq goes back to what is in the file.
        self.segments[index].lastSeq = min(self.segments[index].lastSeq, first - 1)
    }

    /// Room a stop needs after the last record kept: its hole and its clean stop's records.
    static let stopReserve = 2 * (JournalFormat.recordOverhead + 8)

    /// How many of `batch`'s first bytes are whole records ending at most `limit` bytes in.
    private static func wholeRecords(in batch: ByteBuffer, upTo limit: Int) -> Int {
        let end = batch.readerIndex + min(max(limit, 0), batch.readableBytes)
        var at = batch.readerIndex
        while case .good(let r) = JournalFormat.record(in: batch, at: at, end: end) { at += r.size }
        return at - batch.readerIndex
    }

    private static func firstSeq(in batch: ByteBuffer) -> UInt64? {
        guard case .good(let r) = JournalFormat.record(in: batch, at: batch.readerIndex, end: batch.writerIndex) else { return nil }
        return r.seq
    }

    private mutating func syncSegment(_ out: inout Outcome) {
        if fdatasync(self.fd) == 0 {
            out.fsyncs += 1
            self.dirty = false
        } else {
            let path = JournalFiles.path(self.directory.path, firstSeq: self.segments[self.segments.count - 1].firstSeq)
            self.logger.error("journal: cannot fdatasync \(path): \(DurableFile.describe(errno))")
        }
    }

    /// Removes whole segments, oldest first, while the journal is over `max_bytes` or their
    /// last message is older than `max_age`. The segment written to stays.
    mutating func applyRetention(now: Int64) {
        let maxAgeMillis = self.configuration.maxAge.nanoseconds / 1_000_000
        var total = self.segments.reduce(0) { $0 + $1.size }
        while self.segments.count > 1 {
            let oldest = self.segments[0]
            let tooBig = total > self.configuration.maxBytes
            let tooOld = oldest.lastMillis < now - maxAgeMillis
            guard tooBig || tooOld else { break }
            let path = JournalFiles.path(self.directory.path, firstSeq: oldest.firstSeq)
            if unlink(path) != 0 && errno != ENOENT {
                self.logger.error("journal: cannot remove \(path) (retention): \(DurableFile.describe(errno))")
                break
            }
            total -= oldest.size
            self.segments.removeFirst()
            self.logger.info(
                "journal: removed \(JournalFormat.fileName(firstSeq: oldest.firstSeq)) (seq \(oldest.firstSeq)...\(oldest.lastSeq)): \(tooBig ? "over journal.max_bytes" : "older than journal.max_age")"
            )
        }
    }
}
