import Logging
import NIOConcurrencyHelpers
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// The reader thread: a replay's messages, a chunk at a time, from where its cursor stands,
/// with what the journal cannot give said as gaps (`expired`, `damaged`, `not_durable`).
extension Journal {
    /// Where a replay stands: the next seq it wants, and where in which segment it reads.
    struct Cursor: Sendable {
        var expect: UInt64
        var segment: UInt64?
        var offset = 0

        init(from seq: UInt64) {
            self.expect = seq
        }
    }

    enum Item: Sendable {
        /// A message's line, encoded as the live feed encodes it (nil: the filter refused it).
        case message(seq: UInt64, line: ByteBuffer?)
        /// A message as it came (`LineOptions.raw`: the fleet publishes it again).
        case raw(seq: UInt64, UpstreamMessage)
        case gap(GapLine)
    }

    struct Chunk: Sendable {
        var items: [Item] = []
        var cursor: Cursor
        /// Every segment was read to its written end.
        var atEnd = false

        /// Adds a gap; one that continues the gap just before it (same reason and stream, a
        /// segment removed by retention while it was being read) makes it longer instead.
        mutating func append(_ gap: GapLine) {
            if case .gap(var last)? = self.items.last, last.reason == gap.reason, last.stream == gap.stream, let to = last.to, gap.from == to + 1 {
                last.to = gap.to
                last.next = gap.next
                self.items[self.items.count - 1] = .gap(last)
            } else {
                self.items.append(.gap(gap))
            }
        }
    }

    /// How a replay wants its lines: the live feed's encoding, and the client's filter.
    struct LineOptions: Sendable {
        var inlineJSON: Bool
        var filter: Filter?
        /// The messages as they came, not as lines.
        var raw = false
    }

    /// Reads from `cursor` on the reader thread, at most about `maxMessages` and `maxBytes`.
    func read(_ cursor: Cursor, maxMessages: Int, maxBytes: Int, options: LineOptions) -> EventLoopFuture<Chunk> {
        self.submitRead { self.readChunk(cursor, maxMessages: maxMessages, maxBytes: maxBytes, options: options) }
    }

    private static let readSize = 1 << 20

    func readChunk(_ cursor: Cursor, maxMessages: Int, maxBytes: Int, options: LineOptions) -> Chunk {
        let segments = self.segments
        var chunk = Chunk(cursor: cursor)
        var bytes = 0
        var count = 0
        guard !segments.isEmpty else {
            chunk.atEnd = true
            return chunk
        }
        var index: Int
        if let s = chunk.cursor.segment, let i = segments.firstIndex(where: { $0.firstSeq == s }) {
            index = i
        } else {
            // The first read, or its segment went (retention) since the last.
            let first = segments[0]
            if chunk.cursor.expect < first.firstSeq {
                chunk.append(self.gap(GapLine.expired, from: chunk.cursor.expect, to: first.firstSeq - 1, next: first.firstSeq, stream: first.stream))
                chunk.cursor.expect = first.firstSeq
            }
            index = segments.lastIndex { $0.firstSeq <= chunk.cursor.expect } ?? 0
            chunk.cursor.segment = segments[index].firstSeq
            chunk.cursor.offset = JournalFormat.headerSize
        }
        while count < maxMessages && bytes < maxBytes {
            let segment = segments[index]
            if chunk.cursor.offset >= segment.size {
                guard index + 1 < segments.count else {
                    chunk.atEnd = true
                    return chunk
                }
                let next = segments[index + 1]
                if next.stream != segment.stream {
                    // The daemon stopped without writing what it numbered after the segment's
                    // last record (a crash), and the next run counted on in a new stream.
                    chunk.append(self.notDurableAtRestart(after: chunk.cursor.expect - 1, in: segment.stream, next: next))
                } else if next.firstSeq > chunk.cursor.expect {
                    chunk.append(self.gap(GapLine.damaged, from: chunk.cursor.expect, to: next.firstSeq - 1, next: next.firstSeq, stream: next.stream))
                }
                chunk.cursor.expect = next.firstSeq
                index += 1
                chunk.cursor.segment = next.firstSeq
                chunk.cursor.offset = JournalFormat.headerSize
                continue
            }
            let path = JournalFiles.path(self.directory, firstSeq: segment.firstSeq)
            let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                // Removed by retention while we read: what it held has expired.
                let to = index + 1 < segments.count ? segments[index + 1].firstSeq - 1 : segment.lastSeq
                if to >= chunk.cursor.expect {
                    chunk.append(self.gap(GapLine.expired, from: chunk.cursor.expect, to: to, next: to + 1, stream: segment.stream))
                    chunk.cursor.expect = to + 1
                }
                chunk.cursor.offset = segment.size
                continue
            }
            var want = min(Self.readSize, segment.size - chunk.cursor.offset)
            var buffer: ByteBuffer
            while true {
                do {
                    buffer = try JournalFiles.read(fd, at: chunk.cursor.offset, count: want, path: path)
                } catch {
                    buffer = ByteBuffer()
                }
                // A record larger than one read: read all of it.
                if buffer.readableBytes >= 8, let length = buffer.getInteger(at: 0, endianness: .little, as: UInt32.self),
                    Int(length) + 8 > want, Int(length) + 8 <= segment.size - chunk.cursor.offset
                {
                    want = Int(length) + 8
                    continue
                }
                break
            }
            Glibc.close(fd)
            var offset = 0
            let end = buffer.writerIndex
            parse: while offset < end && count < maxMessages && bytes < maxBytes {
                switch JournalFormat.record(in: buffer, at: offset, end: end) {
                case .good(let r):
                    offset += r.size
                    guard r.lastSeq >= chunk.cursor.expect, r.kind != .closed else { continue }
                    if r.seq > chunk.cursor.expect {
                        chunk.append(self.gap(GapLine.damaged, from: chunk.cursor.expect, to: r.seq - 1, next: r.seq, stream: segment.stream))
                    }
                    switch r.kind {
                    case .text, .binary:
                        if options.raw {
                            let message = UpstreamMessage(kind: r.kind == .binary ? .binary : .text, data: r.payload, receivedAtMillis: r.millis)
                            chunk.items.append(.raw(seq: r.seq, message))
                            bytes += r.payload.readableBytes
                        } else {
                            let line = Self.line(r, options)
                            chunk.items.append(.message(seq: r.seq, line: line))
                            bytes += line?.readableBytes ?? 0
                        }
                        count += 1
                    case .hole:
                        let from = max(r.seq, chunk.cursor.expect)
                        chunk.append(self.gap(GapLine.notDurable, from: from, to: r.holeEnd, next: r.holeEnd + 1, stream: segment.stream))
                    case .closed:
                        break
                    }
                    chunk.cursor.expect = r.lastSeq + 1
                case .incomplete where chunk.cursor.offset + end < segment.size:
                    break parse  // the rest of the record comes with the next read
                case .bad(let problem, let next?) where chunk.cursor.offset + next <= segment.size:
                    self.logger.error("journal: \(path): a damaged record at offset \(chunk.cursor.offset + offset): \(problem); skipped (gap damaged)")
                    offset = next
                case .bad(let problem, _):
                    self.logger.error(
                        "journal: \(path): unreadable from offset \(chunk.cursor.offset + offset): \(problem); the rest of the segment is skipped (gap damaged)"
                    )
                    offset = segment.size - chunk.cursor.offset
                case .incomplete:
                    self.logger.error(
                        "journal: \(path): a record cut short at offset \(chunk.cursor.offset + offset); the rest of the segment is skipped (gap damaged)")
                    offset = segment.size - chunk.cursor.offset
                }
            }
            chunk.cursor.offset += offset
        }
        return chunk
    }

    private func gap(_ reason: String, from: UInt64, to: UInt64, next: UInt64, stream: UInt64) -> GapLine {
        let message =
            switch reason {
            case GapLine.expired:
                "no longer in the journal: retention removed it (journal.max_bytes = \(self.configuration.maxBytes), journal.max_age = \(self.configuration.maxAge))"
            case GapLine.damaged:
                "a journal record failed its checksum or could not be read (logged by wsbridged); the records around it are kept"
            default:
                "never written to the journal (its writer was behind by journal.buffer_bytes, or a write failed: logged by wsbridged)"
            }
        return GapLine(stream: Self.streamID(stream), reason: reason, from: from, to: to, next: next, message: message)
    }

    /// The gap where a run that crashed ends in the journal: the messages it numbered after
    /// `last` (in `stream`) never reached the disk, and the next run counts from `next`'s first
    /// seq in its own stream.
    func notDurableAtRestart(after last: UInt64, in stream: UInt64, next: Segment, since: UInt64? = nil) -> GapLine {
        GapLine(
            stream: Self.streamID(next.stream), reason: GapLine.notDurable, next: next.firstSeq, since: since,
            message:
                "wsbridged stopped without a clean shutdown (a crash or kill -9): what stream \(Self.streamID(stream)) numbered after seq \(last) never reached the journal (at most journal.fsync_interval's messages, \(self.configuration.fsyncInterval)); delivery goes on in stream \(Self.streamID(next.stream)) from seq \(next.firstSeq)"
        )
    }

    private static func line(_ r: JournalFormat.Record, _ options: LineOptions) -> ByteBuffer? {
        let message = UpstreamMessage(kind: r.kind == .binary ? .binary : .text, data: r.payload, receivedAtMillis: r.millis)
        var parsed: JSONValue?
        if message.kind == .text && (options.inlineJSON || options.filter != nil) {
            parsed = try? JSONValue.parse(message.data.readableBytesView)
        }
        if let filter = options.filter {
            guard message.kind == .text, filter.matches(json: parsed, text: message.data.readableBytesView) else { return nil }
        }
        return MessageLineEncoder.message(seq: r.seq, message, inlineJSON: options.inlineJSON, parsed: parsed, allocator: ByteBufferAllocator())
    }

    /// Where a consumer's (`stream`, `since`) stands in the journal, when `stream` is one
    /// of its earlier streams: the seq its durable part ended at, and the segment that began
    /// the stream after it. Nil for the current stream and for one the journal never held.
    func earlierStream(_ stream: String) -> (stream: UInt64, end: UInt64, next: Segment)? {
        guard let id = UInt64(stream, radix: 16), id != self.stream else { return nil }
        let segments = self.segments
        guard let lastOfIt = segments.lastIndex(where: { $0.stream == id }), lastOfIt + 1 < segments.count else { return nil }
        let next = segments[lastOfIt + 1]
        return (id, next.firstSeq - 1, next)
    }
}
