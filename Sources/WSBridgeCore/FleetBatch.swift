/// `fleet.batch` (docs/fleet.md, "Batches"): several upstream messages in one message of the
/// JetStream stream, and the numbers followers give them.
///
/// A batch's bytes are its messages one after another, each as a kind byte (0 text, 1 binary),
/// its length (4 bytes, big-endian) and its bytes. Its headers say how many (`Wsbridge-Batch`)
/// and the number of the first (`Wsbridge-Number`): every follower numbers the messages of the
/// stream alike, the batch's from that number on, a message of the stream without a number by
/// its stream seq (a stream no bridge batches), so that seq goes up by one per message however
/// the messages were packed.
public enum FleetBatch {
    /// Messages in one batch, at most (`fleet.batch`).
    public static let maxMessages = 1000
    /// Stream messages looked at backwards, at most, for the last numbered one.
    public static let lookBack = 64

    /// One message's place in a batch's bytes.
    public struct Item: Equatable, Sendable {
        public var binary: Bool
        public var range: Range<Int>
        public init(binary: Bool, range: Range<Int>) {
            self.binary = binary
            self.range = range
        }
    }

    public struct Malformed: Error, Equatable, CustomStringConvertible {
        public let description: String
        public init(_ description: String) { self.description = description }
    }

    /// The bytes a message takes in a batch besides its own.
    public static let overhead = 5

    /// Appends one message to a batch's bytes.
    public static func append(binary: Bool, _ bytes: UnsafeRawBufferPointer, to out: inout [UInt8]) {
        out.append(binary ? 1 : 0)
        let count = UInt32(bytes.count)
        out.append(UInt8(truncatingIfNeeded: count >> 24))
        out.append(UInt8(truncatingIfNeeded: count >> 16))
        out.append(UInt8(truncatingIfNeeded: count >> 8))
        out.append(UInt8(truncatingIfNeeded: count))
        out.append(contentsOf: bytes)
    }

    /// A batch's messages, as many as its header says (`count`), or why its bytes are not one.
    public static func items(of bytes: UnsafeRawBufferPointer, count: Int) throws(Malformed) -> [Item] {
        guard count >= 1, count <= Self.maxMessages else { throw Malformed("Wsbridge-Batch \(count) is not a count from 1 to \(Self.maxMessages)") }
        var items: [Item] = []
        items.reserveCapacity(count)
        var at = 0
        while at < bytes.count {
            guard bytes.count - at >= Self.overhead else { throw Malformed("message \(items.count + 1) is cut short at byte \(at)") }
            let kind = bytes[at]
            guard kind <= 1 else { throw Malformed("message \(items.count + 1) has kind \(kind) (0 text, 1 binary)") }
            let length = Int(bytes[at + 1]) << 24 | Int(bytes[at + 2]) << 16 | Int(bytes[at + 3]) << 8 | Int(bytes[at + 4])
            let start = at + Self.overhead
            guard length <= bytes.count - start else { throw Malformed("message \(items.count + 1) says \(length) bytes, and \(bytes.count - start) are left") }
            items.append(Item(binary: kind == 1, range: start..<start + length))
            at = start + length
        }
        guard items.count == count else { throw Malformed("it holds \(items.count) message(s), and Wsbridge-Batch says \(count)") }
        return items
    }

    /// What a message of the stream says of its numbers.
    public struct Numbers: Equatable, Sendable {
        /// `Wsbridge-Number`: its first message's number (nil: none, numbered by its stream seq).
        public var first: UInt64?
        /// How many messages it holds (`Wsbridge-Batch`, else 1).
        public var count: UInt64
        public init(first: UInt64?, count: UInt64) {
            self.first = first
            self.count = count
        }

        /// The number of its last message, the message at stream seq `seq`.
        public func last(at seq: UInt64) -> UInt64 { self.first.map { $0 + self.count - 1 } ?? seq }
    }

    /// The number a bridge gives the first message it publishes after reading where the stream
    /// stands: `lastSeq` (the stream's last seq, 0: it never had one), `numbered` (the last numbered
    /// message among the last `lookBack` and its last number, nil: none there), `known` (this
    /// bridge's own next number, if it published since it started). Above every number any
    /// follower has given (seq only goes up on every follower, which drops what it numbered
    /// already); when it cannot know (a purged stream, none numbered lately) it goes on from
    /// `maxMessages` × the next stream seq, above any number a message of the stream can have.
    public static func next(lastSeq: UInt64, numbered: UInt64?, known: UInt64?) -> UInt64 {
        guard lastSeq > 0 else { return max(1, known ?? 1) }
        let floor = lastSeq + 1
        if let numbered { return max(numbered + 1, floor, known ?? 0) }
        if let known { return max(known, floor) }
        return UInt64(Self.maxMessages) * floor
    }

    /// How many of the messages at the front of a queue go as the next message of the stream:
    /// those of the batch they went in before (`wentIn`, its last seq: the same messages under the
    /// same id), or one for one app alone, or as many as fit (`max` messages, `maxBytes` with
    /// their framing) of the first one's subject (`subject`, when subjects differ by message),
    /// stopping at one that went in a batch before or is for one app.
    public static func count<Queue: Collection>(of queue: Queue, max: Int, maxBytes: Int, subject: ((Queue.Element) -> String?)? = nil) -> Int
    where Queue.Element: FleetBatchCandidate {
        guard let first = queue.first else { return 0 }
        if let end = first.wentIn { return queue.prefix { $0.seq <= end && $0.wentIn == end }.count }
        if first.alone { return 1 }
        let key = subject?(first)
        var taken = 1
        var bytes = first.byteCount + Self.overhead
        for next in queue.dropFirst() {
            guard taken < max, !next.alone, next.wentIn == nil else { break }
            let size = next.byteCount + Self.overhead
            guard bytes + size <= maxBytes else { break }
            if let subject, subject(next) != key { break }
            taken += 1
            bytes += size
        }
        return taken
    }
}

/// A message waiting to be published, as `FleetBatch.count` sees it.
public protocol FleetBatchCandidate {
    var seq: UInt64 { get }
    /// Its bytes.
    var byteCount: Int { get }
    /// For one follower's app: it goes alone.
    var alone: Bool { get }
    /// The last seq of the batch it went in before (nil: none).
    var wentIn: UInt64? { get }
}
