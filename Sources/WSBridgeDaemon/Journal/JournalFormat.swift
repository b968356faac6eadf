import CWSBridgeLinux
import NIOCore

/// The journal's segment files (docs/journal.md): `DIR/<first seq, 20 digits>.wsj`, each a
/// 40-byte header, then records appended one after another.
///
///     header:  "wsbjrnl1"  version u32 (1)  reserved u32 (0)  stream u64  first seq u64  created ms u64
///     record:  length u32   crc u32   body[length]
///     body:    kind u8   seq u64   receive time ms u64   payload
///
/// `crc` is CRC-32C over the length's four bytes and the body (as the spool's). Kinds: 1 a
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
    static let recordOverhead = 4 + 4 + 1 + 8 + 8
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
        let length = 17 + (payload?.readableBytes ?? 0)
        let start = buffer.writerIndex
        buffer.writeInteger(UInt32(length), endianness: .little)
        buffer.writeInteger(UInt32(0), endianness: .little)  // the crc, set below
        buffer.writeInteger(kind.rawValue)
        buffer.writeInteger(seq, endianness: .little)
        buffer.writeInteger(UInt64(bitPattern: millis), endianness: .little)
        if let payload { buffer.writeImmutableBuffer(payload) }
        buffer.setInteger(Self.checksum(buffer, lengthAt: start, bodyLength: length), at: start + 4, endianness: .little)
    }

    /// A hole's record: the messages `from` through `to` are not in the journal.
    static func writeHole(from: UInt64, to: UInt64, millis: Int64, into buffer: inout ByteBuffer) {
        var payload = ByteBuffer()
        payload.writeInteger(to, endianness: .little)
        Self.write(kind: .hole, seq: from, millis: millis, payload: payload, into: &buffer)
    }

    private static func checksum(_ buffer: ByteBuffer, lengthAt start: Int, bodyLength: Int) -> UInt32 {
        buffer.withUnsafeReadableBytes { raw in
            guard let first = raw.baseAddress else { return 0 }
            let base = first + (start - buffer.readerIndex)
            return cwsb_crc32c(cwsb_crc32c(0, base, 4), base + 8, bodyLength)
        }
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

    enum Parsed {
        case good(Record)
        /// Fewer bytes than the record needs: a torn tail, or a read that stopped mid-record.
        case incomplete
        /// A record that fails its checksum or cannot be; `next` is where the following one
        /// would start, when its length is plausible.
        case bad(String, next: Int?)
    }

    /// The record at `offset` (an index into `bytes`), which ends at `end`.
    static func record(in bytes: ByteBuffer, at offset: Int, end: Int, maxLength: Int) -> Parsed {
        guard end - offset >= 8 else { return .incomplete }
        let length = Int(bytes.getInteger(at: offset, endianness: .little, as: UInt32.self)!)
        let crc = bytes.getInteger(at: offset + 4, endianness: .little, as: UInt32.self)!
        guard length >= 17, length <= maxLength else {
            return .bad("a record length of \(length) bytes, outside 17...\(maxLength)", next: nil)
        }
        guard length <= end - offset - 8 else { return .incomplete }
        let next = offset + 8 + length
        guard Self.checksum(bytes, lengthAt: offset, bodyLength: length) == crc else {
            return .bad("a record of \(length) bytes fails its checksum", next: next)
        }
        guard let kind = Kind(rawValue: bytes.getInteger(at: offset + 8, as: UInt8.self)!) else {
            return .bad("a record of an unknown kind", next: next)
        }
        let seq: UInt64 = bytes.getInteger(at: offset + 9, endianness: .little)!
        let millis = Int64(bitPattern: bytes.getInteger(at: offset + 17, endianness: .little, as: UInt64.self)!)
        let payload = bytes.getSlice(at: offset + 25, length: length - 17)!
        return .good(Record(kind: kind, seq: seq, millis: millis, payload: payload, size: 8 + length))
    }

    /// What a whole segment's records hold (after its header), read the way opening a journal
    /// reads its last segment: the good records in order, the damaged ones between good ones
    /// skipped, and where the readable part ends when the rest is torn or unreadable.
    struct Scan {
        var records: [Record] = []
        var skipped: [(offset: Int, problem: String)] = []
        /// Where the readable records end (the file is cut there), when something follows them.
        var cut: (offset: Int, problem: String)?
        /// Where the readable part ends (after the last record, good or skipped).
        var end: Int
        /// The last record read is a good one (not one skipped).
        var endsWithGood = false
    }

    /// Scans `bytes` (indices: `start` is the first record, `bytes.writerIndex` the file's end).
    static func scan(_ bytes: ByteBuffer, from start: Int) -> Scan {
        let end = bytes.writerIndex
        var scan = Scan(end: start)
        var offset = start
        while offset < end {
            switch Self.record(in: bytes, at: offset, end: end, maxLength: Int(UInt32.max)) {
            case .good(let r):
                scan.records.append(r)
                offset += r.size
                scan.end = offset
                scan.endsWithGood = true
            case .bad(let problem, let next?) where next == end || Self.isGood(bytes, at: next, end: end):
                scan.skipped.append((offset, problem))
                offset = next
                scan.end = offset
                scan.endsWithGood = false
            case .bad(let problem, _):
                scan.cut = (offset, problem)
                return scan
            case .incomplete:
                scan.cut = (offset, "a record cut short by a crash")
                return scan
            }
        }
        return scan
    }

    private static func isGood(_ bytes: ByteBuffer, at offset: Int, end: Int) -> Bool {
        if case .good = Self.record(in: bytes, at: offset, end: end, maxLength: Int(UInt32.max)) { return true }
        return false
    }
}
