import NIOCore

/// The outbound spool's file: a 16-byte header, then records appended one after another.
///
///     header:  "wsbspool"  version u32 LE (1)  reserved u32 (0)
///     record:  length u32 LE   crc u32 LE   body[length]
///     body:    kind u8   id u64 LE   payload
///
/// Records are `LogRecord`s (CRC-32C framing, torn-tail recovery). Kinds: 1 a text message,
/// 2 a binary message (payload: its bytes), 3 "delivered through id" (no payload): every
/// message with an id up to it went upstream.
/// Message ids rise by one per queued send; a delivered record only ever follows the messages
/// it names. Everything is little-endian.
enum SpoolFormat {
    static let magic = Array("wsbspool".utf8)
    static let version: UInt32 = 1
    static let headerSize = 16
    /// length + crc + kind + id.
    static let recordOverhead = LogRecord.frameSize + LogRecord.bodyHeaderSize

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
        LogRecord.append(kind: kind.rawValue, number: id, into: &buffer) { if let payload { $0.writeImmutableBuffer(payload) } }
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
        let scan = LogRecord.scan(file, from: start + Self.headerSize, minBody: LogRecord.bodyHeaderSize) { Kind(rawValue: $0) != nil }
        var pending: [Message] = []
        for (_, body) in scan.records {
            switch Kind(rawValue: body.kind)! {
            case .text, .binary:
                pending.append(Message(id: body.number, kind: Kind(rawValue: body.kind)!, payload: body.rest))
                contents.lastID = max(contents.lastID, body.number)
            case .delivered:
                contents.deliveredThrough = max(contents.deliveredThrough, body.number)
            }
        }
        contents.skipped = scan.skipped.map { ($0.offset - start, $0.problem) }
        if let cut = scan.cut {
            contents.truncatedAt = (cut.offset - start, cut.problem)
            contents.discardedBytes = file.writerIndex - cut.offset
        }
        contents.messages = pending.filter { $0.id > contents.deliveredThrough }
        return contents
    }
}
