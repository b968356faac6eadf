import Logging
import NIOCore
import WSBridgeCore

#if canImport(Glibc)
    import Glibc
#endif

/// The writer thread: records encoded and appended in one write per batch (split where a
/// segment fills), the fdatasync the policy asks for, segments rolled and old ones removed.
extension Journal {
    struct Outcome {
        var segments: [Segment]
        var bytesTaken = 0
        var fsyncs: UInt64 = 0
        var wrote = false
        var scheduleSync = false
        /// Why writing stopped (a failed write or fdatasync).
        var failure: String?
        var closed = false
        var closes: [EventLoopPromise<Void>] = []
        var barriers: [EventLoopPromise<Void>] = []
    }

    func process(_ ops: [Op], _ w: inout Writer) -> Outcome {
        var out = Outcome(segments: w.segments)
        var batch = ByteBuffer()
        var syncAsked = false
        var close: (lastSeq: UInt64, promise: EventLoopPromise<Void>)?
        var skipped = false
        let now = WallClock.millisecondsSinceEpoch()
        for op in ops {
            switch op {
            case .entries(let entries, let bytes):
                out.bytesTaken += bytes
                guard w.fd >= 0, let first = entries.first?.seq, let last = entries.last?.seq else { continue }
                if let at = w.stoppedAt, NIODeadline.now() < at + Self.retryDelay {
                    // Stopped: not even tried (a full disk stays full for a while).
                    w.unwritten = (w.unwritten?.from ?? first, last)
                    skipped = true
                    continue
                }
                if let hole = w.unwritten {
                    self.encodeHole(from: hole.from, to: max(hole.to, first - 1), now, &batch, &w, &out)
                    w.unwritten = nil
                }
                for e in entries {
                    let m = e.message
                    self.makeRoom(for: JournalFormat.recordOverhead + m.data.readableBytes, firstSeq: e.seq, now, &batch, &w, &out)
                    JournalFormat.write(kind: m.kind == .binary ? .binary : .text, seq: e.seq, millis: m.receivedAtMillis, payload: m.data, into: &batch)
                    w.segments[w.segments.count - 1].lastSeq = e.seq
                    w.segments[w.segments.count - 1].lastMillis = m.receivedAtMillis
                }
            case .hole(let from, let to):
                w.unwritten = (w.unwritten?.from ?? from, to)
            case .sync:
                syncAsked = true
            case .close(let lastSeq, let promise):
                close = (lastSeq, promise)
            case .barrier(let promise):
                out.barriers.append(promise)
            }
        }
        if let close, w.fd >= 0 {
            // What the fan-out numbered and never handed over (or could not be written) is a
            // hole; then the clean stop.
            let written = w.segments.last?.lastSeq ?? 0
            if let hole = w.unwritten {
                self.encodeHole(from: hole.from, to: max(hole.to, close.lastSeq), now, &batch, &w, &out)
                w.unwritten = nil
            } else if close.lastSeq > written {
                self.encodeHole(from: written + 1, to: close.lastSeq, now, &batch, &w, &out)
            }
            JournalFormat.write(kind: .closed, seq: close.lastSeq, millis: now, payload: nil, into: &batch)
        }
        self.flush(&batch, &w, &out)
        if w.fd >= 0, w.dirty, out.failure == nil, syncAsked || close != nil || self.configuration.fsync == .always {
            self.sync(&w, &out)
        }
        if syncAsked { self.applyRetention(&w, now: now) }
        if skipped, out.failure == nil, !out.wrote { out.failure = w.stopReason }
        out.scheduleSync = w.dirty && close == nil && out.failure == nil
        if let close {
            if w.fd >= 0 {
                Glibc.close(w.fd)
                Glibc.close(w.lockFD)
                w.fd = -1
            }
            out.closed = true
            out.closes.append(close.promise)
        }
        out.segments = w.segments
        return out
    }

    private func encodeHole(from: UInt64, to: UInt64, _ now: Int64, _ batch: inout ByteBuffer, _ w: inout Writer, _ out: inout Outcome) {
        guard from <= to else { return }
        self.makeRoom(for: JournalFormat.recordOverhead + 8, firstSeq: from, now, &batch, &w, &out)
        JournalFormat.writeHole(from: from, to: to, millis: now, into: &batch)
        w.segments[w.segments.count - 1].lastSeq = to
        w.segments[w.segments.count - 1].lastMillis = now
    }

    /// Rolls to a new segment (its first seq `firstSeq`) when a record of `size` bytes would
    /// take the current one past `segment_bytes` (a segment with no record takes any).
    private func makeRoom(for size: Int, firstSeq: UInt64, _ now: Int64, _ batch: inout ByteBuffer, _ w: inout Writer, _ out: inout Outcome) {
        let current = w.segments[w.segments.count - 1]
        let used = current.size + batch.readableBytes
        guard used > JournalFormat.headerSize, used + size > self.configuration.segmentBytes else { return }
        self.flush(&batch, &w, &out)
        guard w.fd >= 0, out.failure == nil else { return }
        if w.dirty { self.sync(&w, &out) }
        let header = JournalFormat.Header(stream: self.stream, firstSeq: firstSeq, createdMillis: now)
        do {
            let fd = try JournalFiles.create(self.directory, header)
            Glibc.close(w.fd)
            w.fd = fd
            w.segments.append(
                Segment(firstSeq: firstSeq, stream: self.stream, createdMillis: now, size: JournalFormat.headerSize, lastSeq: firstSeq - 1, lastMillis: now))
            out.fsyncs += 2
            self.applyRetention(&w, now: now)
        } catch {
            self.logger.error("journal: \(error); the segment \(JournalFormat.fileName(firstSeq: current.firstSeq)) goes on past journal.segment_bytes")
        }
    }

    /// Writes the batch at the end of the current segment. A failed write is undone (the file
    /// cut back), its messages become a hole, and the journal stops until `retryDelay` passed.
    private func flush(_ batch: inout ByteBuffer, _ w: inout Writer, _ out: inout Outcome) {
        guard batch.readableBytes > 0, w.fd >= 0 else { return }
        defer { batch.clear() }
        let index = w.segments.count - 1
        let before = w.segments[index].size
        if out.failure == nil, let problem = DurableFile.writeAll(w.fd, batch, at: before) {
            _ = ftruncate(w.fd, off_t(before))
            self.stop("cannot write \(JournalFiles.path(self.directory, firstSeq: w.segments[index].firstSeq)): \(problem)", batch, &w, &out)
            return
        }
        guard out.failure == nil else {
            self.stop(out.failure!, batch, &w, &out)
            return
        }
        w.segments[index].size += batch.readableBytes
        w.dirty = true
        w.stoppedAt = nil
        w.stopReason = nil
        out.wrote = true
    }

    /// The messages in `batch` were not written: they are a hole, recorded before the next
    /// ones that are.
    private func stop(_ reason: String, _ batch: ByteBuffer, _ w: inout Writer, _ out: inout Outcome) {
        // The batch's records are in order: its first record's seq starts the hole, and the
        // segment's lastSeq (advanced as they were encoded) ends it.
        let index = w.segments.count - 1
        let first = Self.firstSeq(in: batch) ?? w.segments[index].lastSeq
        let last = w.segments[index].lastSeq
        if out.failure == nil {
            self.logger.error(
                "journal: \(reason); messages from seq \(first) are not journaled (live delivery goes on); trying again in \(Self.retryDelay.nanoseconds / 1_000_000_000) s: free space in \(self.directory)"
            )
        }
        out.failure = reason
        w.stoppedAt = .now()
        w.stopReason = reason
        w.unwritten = (min(w.unwritten?.from ?? first, first), last)
        // The segment's lastSeq goes back to what is in the file.
        w.segments[index].lastSeq = min(w.segments[index].lastSeq, first - 1)
    }

    private static func firstSeq(in batch: ByteBuffer) -> UInt64? {
        guard case .good(let r) = JournalFormat.record(in: batch, at: batch.readerIndex, end: batch.writerIndex) else { return nil }
        return r.seq
    }

    private func sync(_ w: inout Writer, _ out: inout Outcome) {
        if fdatasync(w.fd) == 0 {
            out.fsyncs += 1
            w.dirty = false
        } else {
            let path = JournalFiles.path(self.directory, firstSeq: w.segments[w.segments.count - 1].firstSeq)
            self.logger.error("journal: cannot fdatasync \(path): \(DurableFile.describe(errno))")
        }
    }

    /// Removes whole segments, oldest first, while the journal is over `max_bytes` or their
    /// last message is older than `max_age`. The segment written to stays.
    func applyRetention(_ w: inout Writer, now: Int64) {
        let maxAgeMillis = self.configuration.maxAge.nanoseconds / 1_000_000
        var total = w.segments.reduce(0) { $0 + $1.size }
        while w.segments.count > 1 {
            let oldest = w.segments[0]
            let tooBig = total > self.configuration.maxBytes
            let tooOld = oldest.lastMillis < now - maxAgeMillis
            guard tooBig || tooOld else { break }
            let path = JournalFiles.path(self.directory, firstSeq: oldest.firstSeq)
            if unlink(path) != 0 && errno != ENOENT {
                self.logger.error("journal: cannot remove \(path) (retention): \(DurableFile.describe(errno))")
                break
            }
            total -= oldest.size
            w.segments.removeFirst()
            self.logger.info(
                "journal: removed \(JournalFormat.fileName(firstSeq: oldest.firstSeq)) (seq \(oldest.firstSeq)...\(oldest.lastSeq)): \(tooBig ? "over journal.max_bytes" : "older than journal.max_age")"
            )
        }
    }
}
