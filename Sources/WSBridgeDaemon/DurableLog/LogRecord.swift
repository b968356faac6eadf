import CWSBridgeLinux
import NIOCore

/// A durable log's record, as the spool, the journal and any later log write it:
///
///     record:  length u32 LE   crc u32 LE   body[length]
///     body:    kind u8   number u64 LE   rest
///
/// `crc` is CRC-32C over the length's four bytes and the body, so a torn length is caught as
/// surely as a torn body. The number is the log's own (the spool's message id, the journal's
/// seq); `rest` is the log's own too (the journal's receive time, then the payload).
///
/// Reading a file back (`scan`) is the same for every log: a record whose header or body a
/// crash cut short, or one that is damaged with no good record after it, ends the readable
/// part (the torn tail); a damaged record followed by a good one (or by the end) is skipped.
enum LogRecord {
    /// length + crc.
    static let frameSize = 8
    /// kind + number.
    static let bodyHeaderSize = 9

    /// Appends a record: `kind`, `number`, then what `rest` writes.
    @inline(__always)
    static func append(kind: UInt8, number: UInt64, into buffer: inout ByteBuffer, _ rest: (inout ByteBuffer) -> Void) {
        let start = buffer.writerIndex
        buffer.writeInteger(UInt32(0), endianness: .little)  // the length, set below
        buffer.writeInteger(UInt32(0), endianness: .little)  // the crc, set below
        buffer.writeInteger(kind)
        buffer.writeInteger(number, endianness: .little)
        rest(&buffer)
        let length = buffer.writerIndex - start - Self.frameSize
        buffer.setInteger(UInt32(length), at: start, endianness: .little)
        buffer.setInteger(Self.checksum(buffer, at: start, bodyLength: length), at: start + 4, endianness: .little)
    }

    private static func checksum(_ buffer: ByteBuffer, at start: Int, bodyLength: Int) -> UInt32 {
        buffer.withUnsafeReadableBytes { raw in
            guard let first = raw.baseAddress else { return 0 }
            let base = first + (start - buffer.readerIndex)
            return cwsb_crc32c(cwsb_crc32c(0, base, 4), base + 8, bodyLength)
        }
    }

    /// A good record's body.
    struct Body {
        var kind: UInt8
        var number: UInt64
        /// What follows the number (a slice of the bytes read).
        var rest: ByteBuffer
        /// The whole record's size in the file.
        var size: Int
    }

    enum Parsed {
        case good(Body)
        /// Fewer bytes than the record needs: a torn tail, or a read that stopped mid-record.
        case incomplete(String)
        /// A record that fails its checksum, or cannot be one, or is of a kind the log does not
        /// know; `next` is where the following one would start, when its length is plausible.
        case bad(String, next: Int?)
    }

    /// The record at `offset` (an index into `bytes`), which ends at `end`. A body is at least
    /// `minBody` bytes; `isKnown` says which kinds the log has.
    static func parse(_ bytes: ByteBuffer, at offset: Int, end: Int, minBody: Int, isKnown: (UInt8) -> Bool) -> Parsed {
        guard end - offset >= Self.frameSize else {
            return .incomplete("\(end - offset) byte(s) where a record header (8 bytes) should be: a write was cut short")
        }
        let length = Int(bytes.getInteger(at: offset, endianness: .little, as: UInt32.self)!)
        let crc = bytes.getInteger(at: offset + 4, endianness: .little, as: UInt32.self)!
        guard length >= minBody else { return .bad("a record length of \(length) bytes, below the smallest (\(minBody))", next: nil) }
        guard length <= end - offset - Self.frameSize else {
            return .incomplete("a record of \(length) bytes with only \(end - offset - Self.frameSize) left in the file: a write was cut short")
        }
        let next = offset + Self.frameSize + length
        guard Self.checksum(bytes, at: offset, bodyLength: length) == crc else {
            return .bad("a record of \(length) bytes fails its checksum", next: next)
        }
        let kind = bytes.getInteger(at: offset + 8, as: UInt8.self)!
        guard isKnown(kind) else { return .bad("a record of an unknown kind", next: next) }
        let number: UInt64 = bytes.getInteger(at: offset + 9, endianness: .little)!
        let rest = bytes.getSlice(at: offset + 8 + Self.bodyHeaderSize, length: length - Self.bodyHeaderSize)!
        return .good(Body(kind: kind, number: number, rest: rest, size: Self.frameSize + length))
    }

    /// What a file's records hold, read the way opening a log reads it.
    struct Scan {
        /// The good records, in order, with their offsets.
        var records: [(offset: Int, body: Body)] = []
        /// Damaged records between good ones (or before the end): skipped.
        var skipped: [(offset: Int, problem: String)] = []
        /// Where the readable records end, when something unreadable follows them.
        var cut: (offset: Int, problem: String)?
        /// Where the readable part ends (after the last record, good or skipped).
        var end: Int
        /// The last record read is a good one (not one skipped).
        var endsWithGood = false
    }

    /// Scans `bytes` from index `start` to its end.
    static func scan(_ bytes: ByteBuffer, from start: Int, minBody: Int, isKnown: (UInt8) -> Bool) -> Scan {
        let end = bytes.writerIndex
        var scan = Scan(end: start)
        var offset = start
        while offset < end {
            switch Self.parse(bytes, at: offset, end: end, minBody: minBody, isKnown: isKnown) {
            case .good(let body):
                scan.records.append((offset, body))
                offset += body.size
                scan.end = offset
                scan.endsWithGood = true
            case .bad(let problem, let next?) where next == end || Self.isGood(bytes, at: next, end: end, minBody: minBody, isKnown: isKnown):
                scan.skipped.append((offset, problem))
                offset = next
                scan.end = offset
                scan.endsWithGood = false
            case .bad(let problem, _), .incomplete(let problem):
                scan.cut = (offset, problem)
                return scan
            }
        }
        return scan
    }

    private static func isGood(_ bytes: ByteBuffer, at offset: Int, end: Int, minBody: Int, isKnown: (UInt8) -> Bool) -> Bool {
        if case .good = Self.parse(bytes, at: offset, end: end, minBody: minBody, isKnown: isKnown) { return true }
        return false
    }
}
