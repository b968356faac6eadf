import NIOCore

/// The journal's segment files (docs/journal.md): `DIR/<first seq, 20 digits>.wsj`, each a
/// 40-byte header, then records appended one after another.
///
///     header:  "wsbjrnl1"  version u32 (1)  reserved u32 (0)  stream u64  first seq u64  created ms u64
///     record:  length u32   crc u32   body[length]
///     body:    kind u8   seq u64   receive time ms u64   payload
///
/// Records are `LogRecord`s (CRC-32C framing, torn-tail recovery), as the spool's. Kinds: 1 a
/// text message, 2 a binary message (payload: its bytes), 3 "closed": the daemon stopped
/// cleanly after seq (no payload), 4 "hole": the messages from seq through the u64 in the
/// payload were never written (the writer's buffer was full, or a write failed). A segment
/// holds one stream; its messages' seqs rise by one from its first seq, holes included.
/// Everything is little-endian.
enum JournalFormat {
    static let magic = Array("wsbjrnl1".utf8)
    static let version: UInt32 = 1
    static let headerSize = 40
    /// length + crc + kind + seq + time.
    static let recordOverhead = LogRecord.frameSize + LogRecord.bodyHeaderSize + 8
    /// kind + seq + time.
    static let minBody = LogRecord.bodyHeaderSize + 8
    static let suffix = ".wsj"

    enum Kind: UInt8, Sendable {
        case text = 1
        case binary = 2
        case closed = 3
        case hole = 4
    }

    struct Header: Equatable, Sendable {
        var stream: UInt64
        var firstSeq: UInt64
        var createdMillis: Int64
    }

    static func fileName(firstSeq: UInt64) -> String {
        let digits = String(firstSeq)
        return String(repeating: "0", count: max(0, 20 - digits.count)) + digits + Self.suffix
    }

    /// The first seq a segment's file name gives, nil for any other file.
    static func firstSeq(fileName: String) -> UInt64? {
        guard fileName.hasSuffix(Self.suffix), fileName.utf8.count == 20 + Self.suffix.utf8.count else { return nil }
        return UInt64(fileName.dropLast(Self.suffix.count))
    }

    static func header(_ h: Header) -> ByteBuffer {
        var b = ByteBuffer()
        b.reserveCapacity(Self.headerSize)
        b.writeBytes(Self.magic)
        b.writeInteger(Self.version, endianness: .little)
        b.writeInteger(UInt32(0), endianness: .little)
        b.writeInteger(h.stream, endianness: .little)
        b.writeInteger(h.firstSeq, endianness: .little)
        b.writeInteger(UInt64(bitPattern: h.createdMillis), endianness: .little)
        return b
    }

    enum HeaderProblem: Error, CustomStringConvertible, Equatable {
        case short(Int)
        case notAJournal
        case newerVersion(UInt32)

        var description: String {
            switch self {
            case .short(let n): "it holds \(n) byte(s), less than a segment header (\(JournalFormat.headerSize)): its creation was cut short"
            case .notAJournal: "it does not start with the journal header (\"wsbjrnl1\"): it is not a wsbridged journal segment"
            case .newerVersion(let v): "it is version \(v) of the journal format; this wsbridged reads version \(JournalFormat.version)"
            }
        }
    }

    static func readHeader(_ bytes: ByteBuffer) throws(HeaderProblem) -> Header {
        guard bytes.readableBytes >= Self.headerSize else { throw .short(bytes.readableBytes) }
        let at = bytes.readerIndex
        guard bytes.getBytes(at: at, length: 8) == Self.magic else { throw .notAJournal }
        let version = bytes.getInteger(at: at + 8, endianness: .little, as: UInt32.self)!
        guard version == Self.version else { throw version > Self.version ? .newerVersion(version) : .notAJournal }
        return Header(
            stream: bytes.getInteger(at: at + 16, endianness: .little)!,
            firstSeq: bytes.getInteger(at: at + 24, endianness: .little)!,
            createdMillis: Int64(bitPattern: bytes.getInteger(at: at + 32, endianness: .little, as: UInt64.self)!)
        )
    }

    /// Appends one record to `buffer`.
    static func write(kind: Kind, seq: UInt64, millis: Int64, payload: ByteBuffer?, into buffer: inout ByteBuffer) {
        LogRecord.append(kind: kind.rawValue, number: seq, into: &buffer) { b in
            b.writeInteger(UInt64(bitPattern: millis), endianness: .little)
            if let payload { b.writeImmutableBuffer(payload) }
        }
    }

    /// A hole's record: the messages `from` through `to` are not in the journal.
    static func writeHole(from: UInt64, to: UInt64, millis: Int64, into buffer: inout ByteBuffer) {
        var payload = ByteBuffer()
        payload.writeInteger(to, endianness: .little)
        Self.write(kind: .hole, seq: from, millis: millis, payload: payload, into: &buffer)
    }

    struct Record: Sendable {
        var kind: Kind
        var seq: UInt64
        var millis: Int64
        /// A slice of the bytes read.
        var payload: ByteBuffer
        /// Its size in the file.
        var size: Int

        /// A hole's last seq.
        var holeEnd: UInt64 { self.payload.getInteger(at: self.payload.readerIndex, endianness: .little) ?? self.seq }
        /// The last seq this record accounts for.
        var lastSeq: UInt64 { self.kind == .hole ? self.holeEnd : self.seq }
    }

    /// The record at `offset` (an index into `bytes`), which ends at `end`.
    static func record(in bytes: ByteBuffer, at offset: Int, end: Int) -> Parsed {
        switch LogRecord.parse(bytes, at: offset, end: end, minBody: Self.minBody, isKnown: Self.isKnown) {
        case .good(let body): .good(Self.record(body))
        case .incomplete: .incomplete
        case .bad(let problem, let next): .bad(problem, next: next)
        }
    }

    enum Parsed {
        case good(Record)
        /// Fewer bytes than the record needs: a torn tail, or a read that stopped mid-record.
        case incomplete
        /// A record that fails its checksum or cannot be; `next` is where the following one
        /// would start, when its length is plausible.
        case bad(String, next: Int?)
    }

    private static func isKnown(_ kind: UInt8) -> Bool { Kind(rawValue: kind) != nil }

    private static func record(_ body: LogRecord.Body) -> Record {
        var rest = body.rest
        let millis = Int64(bitPattern: rest.readInteger(endianness: .little, as: UInt64.self)!)
        return Record(kind: Kind(rawValue: body.kind)!, seq: body.number, millis: millis, payload: rest, size: body.size)
    }

    /// What a whole segment's records hold (after its header), read the way opening a journal
    /// reads its last segment: the good records in order, the damaged ones between good ones
    /// skipped, and where the readable part ends when the rest is torn or unreadable.
    struct Scan {
        var records: [Record]
        var skipped: [(offset: Int, problem: String)]
        /// Where the readable records end (the file is cut there), when something follows them.
        var cut: (offset: Int, problem: String)?
        /// Where the readable part ends (after the last record, good or skipped).
        var end: Int
        /// The last record read is a good one (not one skipped).
        var endsWithGood: Bool
    }

    /// Scans `bytes` (indices: `start` is the first record, `bytes.writerIndex` the file's end).
    static func scan(_ bytes: ByteBuffer, from start: Int) -> Scan {
        let scan = LogRecord.scan(bytes, from: start, minBody: Self.minBody, isKnown: Self.isKnown)
        return Scan(
            records: scan.records.map { Self.record($0.body) }, skipped: scan.skipped, cut: scan.cut, end: scan.end, endsWithGood: scan.endsWithGood)
    }
}
