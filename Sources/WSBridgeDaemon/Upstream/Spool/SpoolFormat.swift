import CWSBridgeLinux
import NIOCore

/// The outbound spool's file: a 16-byte header, then records appended one after another.
///
///     header:  "wsbspool"  version u32 LE (1)  reserved u32 (0)
///     record:  length u32 LE   crc u32 LE   body[length]
///     body:    kind u8   id u64 LE   payload
///
/// `crc` is CRC-32C over the length's four bytes and the body, so a torn length is caught as
/// surely as a torn body. Kinds: 1 a text message, 2 a binary message (payload: its bytes),
/// 3 "delivered through id" (no payload): every message with an id up to it went upstream.
/// Message ids rise by one per queued send; a delivered record only ever follows the messages
/// it names. Everything is little-endian.
enum SpoolFormat {
    static let magic = Array("wsbspool".utf8)
    static let version: UInt32 = 1
    static let headerSize = 16
    /// length + crc + kind + id.
    static let recordOverhead = 4 + 4 + 1 + 8

    enum Kind: UInt8 {
        case text = 1
        case binary = 2
        case delivered = 3

        init(_ kind: UpstreamMessage.Kind) {
            self = kind == .binary ? .binary : .text
        }

        /// The message kind of a text or binary record.
        var message: UpstreamMessage.Kind { self == .binary ? .binary : .text }
    }

    static func header() -> ByteBuffer {
        var b = ByteBuffer()
        b.writeBytes(Self.magic)
        b.writeInteger(Self.version, endianness: .little)
        b.writeInteger(UInt32(0), endianness: .little)
        return b
    }

    /// Appends one record to `buffer`.
    static func write(kind: Kind, id: UInt64, payload: ByteBuffer?, into buffer: inout ByteBuffer) {
        let length = 1 + 8 + (payload?.readableBytes ?? 0)
        let start = buffer.writerIndex
        buffer.writeInteger(UInt32(length), endianness: .little)
        buffer.writeInteger(UInt32(0), endianness: .little)  // the crc, set below
        buffer.writeInteger(kind.rawValue)
        buffer.writeInteger(id, endianness: .little)
        if let payload { buffer.writeImmutableBuffer(payload) }
        let crc = Self.checksum(buffer, lengthAt: start, bodyLength: length)
        buffer.setInteger(crc, at: start + 4, endianness: .little)
    }

    private static func checksum(_ buffer: ByteBuffer, lengthAt start: Int, bodyLength: Int) -> UInt32 {
        buffer.withUnsafeReadableBytes { raw in
            guard let first = raw.baseAddress else { return 0 }
            let base = first + (start - buffer.readerIndex)
            let afterLength = cwsb_crc32c(0, base, 4)
            return cwsb_crc32c(afterLength, base + 8, bodyLength)
        }
    }

    struct Message: Equatable {
        var id: UInt64
        var kind: Kind
        var payload: ByteBuffer
    }

    /// What a file holds: the messages not yet delivered, in order, and what was wrong with it.
    struct Contents {
        var messages: [Message] = []
        /// The highest message id written (the next send continues after it).
        var lastID: UInt64 = 0
        var deliveredThrough: UInt64 = 0
        /// Records that failed their checksum (or had an unknown kind) between good ones: skipped.
        var skipped: [(offset: Int, problem: String)] = []
        /// Where the readable records end, when the rest of the file is torn or unreadable.
        var truncatedAt: (offset: Int, problem: String)?
        /// The bytes after `truncatedAt`.
        var discardedBytes = 0
    }

    enum HeaderProblem: Error, CustomStringConvertible {
        case notASpool
        case newerVersion(UInt32)

        var description: String {
            switch self {
            case .notASpool: "it does not start with the spool header (\"wsbspool\"): it is not a wsbridged spool"
            case .newerVersion(let v): "it is version \(v) of the spool format; this wsbridged reads version \(SpoolFormat.version)"
            }
        }
    }

    /// Reads a whole file. A file shorter than the header is an empty spool (a crash while
    /// it was being created). A bad record followed by a good one (or by the end) is skipped;
    /// one that is not ends the readable part: it and everything after it are the torn tail.
    static func read(_ file: ByteBuffer) throws(HeaderProblem) -> Contents {
        var contents = Contents()
        guard file.readableBytes >= Self.headerSize else {
            return contents
        }
        let start = file.readerIndex
        guard file.getBytes(at: start, length: 8) == Self.magic else { throw .notASpool }
        let version = file.getInteger(at: start + 8, endianness: .little, as: UInt32.self) ?? 0
        guard version == Self.version else {
            if version > Self.version { throw .newerVersion(version) }
            throw .notASpool
        }
        let end = file.writerIndex
        var offset = start + Self.headerSize
        var pending: [Message] = []
        while offset < end {
            switch Self.record(in: file, at: offset, end: end) {
            case .good(let kind, let id, let payload, let next):
                switch kind {
                case .text, .binary:
                    pending.append(Message(id: id, kind: kind, payload: payload))
                    contents.lastID = max(contents.lastID, id)
                case .delivered:
                    contents.deliveredThrough = max(contents.deliveredThrough, id)
                }
                offset = next
            case .bad(let problem, let next?) where next == end || Self.isGood(file, at: next, end: end):
                contents.skipped.append((offset - start, problem))
                offset = next
            case .bad(let problem, _):
                contents.truncatedAt = (offset - start, problem)
                contents.discardedBytes = end - offset
                offset = end
            }
        }
        contents.messages = pending.filter { $0.id > contents.deliveredThrough }
        return contents
    }

    private enum Parsed {
        case good(Kind, UInt64, ByteBuffer, next: Int)
        /// `next` is where the following record would start, when the length is plausible.
        case bad(String, next: Int?)
    }

    private static func isGood(_ file: ByteBuffer, at offset: Int, end: Int) -> Bool {
        if case .good = Self.record(in: file, at: offset, end: end) { return true }
        return false
    }

    private static func record(in file: ByteBuffer, at offset: Int, end: Int) -> Parsed {
        guard end - offset >= 8, let length = file.getInteger(at: offset, endianness: .little, as: UInt32.self),
            let crc = file.getInteger(at: offset + 4, endianness: .little, as: UInt32.self)
        else {
            return .bad("\(end - offset) byte(s) where a record header (8 bytes) should be: a write was cut short", next: nil)
        }
        let bodyLength = Int(length)
        guard bodyLength >= 9 else { return .bad("a record length of \(bodyLength) bytes, below the smallest (9)", next: nil) }
        guard bodyLength <= end - offset - 8 else {
            return .bad("a record of \(bodyLength) bytes with only \(end - offset - 8) left in the file: a write was cut short", next: nil)
        }
        let next = offset + 8 + bodyLength
        guard Self.checksum(file, lengthAt: offset, bodyLength: bodyLength) == crc else {
            return .bad("a record of \(bodyLength) bytes fails its checksum", next: next)
        }
        guard let kind = Kind(rawValue: file.getInteger(at: offset + 8, as: UInt8.self) ?? 0) else {
            return .bad("a record of an unknown kind", next: next)
        }
        let id = file.getInteger(at: offset + 9, endianness: .little, as: UInt64.self) ?? 0
        let payload = file.getSlice(at: offset + 17, length: bodyLength - 9) ?? ByteBuffer()
        return .good(kind, id, payload, next: next)
    }
}
