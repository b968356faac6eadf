import Logging
import NIOConcurrencyHelpers
import NIOCore
import WSBridgeCore

#if canImport(Glibc)
    import Glibc
#endif

/// Opening a journal: the lock, the segments' headers, the last segment read back (a torn
/// tail cut, damaged records logged), the stream and seq the new run continues from, and the
/// segment it writes to.
extension Journal {
    /// Opens (creating it if needed) the journal in `configuration.dir`. Blocks: call off the
    /// event loop. `numberedElsewhere`: its seqs are a stream's outside this daemon (a fleet
    /// follower's, JetStream's): a crash loses none of them (they are taken from that stream
    /// again, under the same seqs), so the next run goes on in the same stream.
    static func open(
        configuration: Configuration.Journal, numberedElsewhere: Bool = false, eventLoop: any EventLoop, logger: Logger
    ) throws(Failure) -> (Journal, Recovered) {
        guard let directory = configuration.dir else { throw .journalNotSet }
        var lock = try LogDirectory.lock(directory, .journal)
        do throws(Failure) {
            var segments = try Self.readSegments(directory, logger: logger)
            let tail = try Self.recoverLast(directory, &segments, logger: logger)
            let recovered: Recovered
            if let last = segments.last {
                recovered =
                    tail.clean || numberedElsewhere
                    ? Recovered(stream: last.stream, lastSeq: last.lastSeq, clean: true)
                    : Recovered(stream: Self.newStream(not: last.stream), lastSeq: last.lastSeq, clean: false, previousStream: last.stream)
            } else {
                recovered = Recovered(stream: Self.newStream(not: 0), lastSeq: tail.lastSeq, clean: true, fresh: true)
            }
            let now = WallClock.millisecondsSinceEpoch()
            let fd: CInt
            if let last = segments.last, tail.clean, last.size < configuration.segmentBytes {
                // A clean stop: append to its segment, after its closed record.
                fd = try JournalFiles.openSegment(directory, firstSeq: last.firstSeq, flags: O_RDWR)
            } else {
                if let last = segments.last, last.lastSeq < last.firstSeq {
                    // No message in it: the new segment takes its name (and its place).
                    unlink(JournalFiles.path(directory, firstSeq: last.firstSeq))
                    segments.removeLast()
                }
                let header = JournalFormat.Header(stream: recovered.stream, firstSeq: recovered.lastSeq + 1, createdMillis: now)
                fd = try JournalFiles.create(directory, header)
                segments.append(
                    Segment(
                        firstSeq: header.firstSeq, stream: header.stream, createdMillis: now, size: JournalFormat.headerSize, lastSeq: recovered.lastSeq,
                        lastMillis: now))
            }
            var writer = JournalWriter(
                configuration: configuration, directory: lock, stream: recovered.stream, fd: fd, segments: segments, eventLoop: eventLoop, logger: logger)
            writer.applyRetention(now: now)
            return (Journal(eventLoop: eventLoop, writer: writer, recovered: recovered), recovered)
        } catch {
            lock.unlock()
            throw error
        }
    }

    private static func newStream(not old: UInt64) -> UInt64 {
        var s = UInt64.random(in: 1 ... .max)
        while s == old { s = UInt64.random(in: 1 ... .max) }
        return s
    }

    /// Every segment's header, oldest first. One that cannot be read is logged and left out
    /// (a consumer replaying across it is told `damaged`); an empty last one (its creation cut
    /// short) is removed.
    private static func readSegments(_ directory: String, logger: Logger) throws(Failure) -> [Segment] {
        let seqs = try JournalFiles.list(directory)
        var segments: [Segment] = []
        for (i, first) in seqs.enumerated() {
            let path = JournalFiles.path(directory, firstSeq: first)
            let fd = try JournalFiles.openSegment(directory, firstSeq: first, flags: O_RDONLY)
            defer { Glibc.close(fd) }
            let bytes = try JournalFiles.read(fd, at: 0, count: JournalFormat.headerSize, path: path)
            do {
                let header = try JournalFormat.readHeader(bytes)
                guard header.firstSeq == first else {
                    logger.error("journal: \(path) says its first seq is \(header.firstSeq), not \(first) as its name does; left out (move it away)")
                    continue
                }
                let modified = JournalFiles.modifiedMillis(path) ?? header.createdMillis
                let next = i + 1 < seqs.count ? seqs[i + 1] : first
                segments.append(
                    Segment(
                        firstSeq: first, stream: header.stream, createdMillis: header.createdMillis, size: JournalFiles.size(fd),
                        lastSeq: max(first, next) - 1, lastMillis: modified))
            } catch .short(let n) where i == seqs.count - 1 {
                logger.warning("journal: \(path) holds \(n) byte(s), less than its header: its creation was cut short; removed")
                unlink(path)
            } catch {
                logger.error("journal: \(path): \(error); left out (move it away); a consumer replaying across it is told its messages are damaged")
            }
        }
        return segments
    }

    /// Reads the last segment's records: its last seq, whether the daemon stopped cleanly
    /// (its last record is `closed`), damaged records logged, a torn tail cut off.
    private static func recoverLast(
        _ directory: String, _ segments: inout [Segment], logger: Logger
    ) throws(Failure) -> (lastSeq: UInt64, clean: Bool) {
        guard let last = segments.last else { return (0, true) }
        let path = JournalFiles.path(directory, firstSeq: last.firstSeq)
        let fd = try JournalFiles.openSegment(directory, firstSeq: last.firstSeq, flags: O_RDWR)
        defer { Glibc.close(fd) }
        let bytes = try JournalFiles.read(fd, at: 0, count: last.size, path: path)
        let scan = JournalFormat.scan(bytes, from: JournalFormat.headerSize)
        for skipped in scan.skipped {
            logger.error(
                "journal: \(path): skipped a damaged record at offset \(skipped.offset): \(skipped.problem); a consumer replaying it is told (gap damaged)")
        }
        if let cut = scan.cut {
            Self.cut(fd, path, at: cut.offset, dropping: bytes.writerIndex - cut.offset, cut.problem, logger)
        }
        let offset = scan.cut?.offset ?? scan.end
        let lastSeq = max(last.firstSeq - 1, scan.records.map(\.lastSeq).max() ?? 0)
        let lastMillis = scan.records.last?.millis ?? last.createdMillis
        // Clean: the last thing in the file is the closed record.
        let clean = scan.records.last?.kind == .closed && scan.endsWithGood && scan.cut == nil
        segments[segments.count - 1].size = offset
        segments[segments.count - 1].lastSeq = lastSeq
        segments[segments.count - 1].lastMillis = lastMillis
        return (lastSeq, clean)
    }

    private static func cut(_ fd: CInt, _ path: String, at offset: Int, dropping bytes: Int, _ problem: String, _ logger: Logger) {
        logger.error("journal: \(path): truncated at offset \(offset), dropping \(bytes) byte(s): \(problem); every record before it is kept")
        if ftruncate(fd, off_t(offset)) != 0 {
            logger.error("journal: cannot truncate \(path): \(DurableFile.describe(errno))")
        }
    }
}
