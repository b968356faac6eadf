import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// Message lines with consecutive seqs, one after another in one buffer: the lines of one flush,
/// or a single line. What a subscriber's queue holds (a flush's lines are one entry in it).
struct LineBatch: QueuedLines {
    let lines: ByteBuffer
    /// The seq of the first line.
    let seq: UInt64
    /// Where each line ends (from the buffer's reader index); empty for a single line.
    private let ends: [Int]

    init(lines: ByteBuffer, seq: UInt64, ends: [Int]) {
        self.lines = lines
        self.seq = seq
        self.ends = ends
    }

    /// One line.
    init(_ line: ByteBuffer, seq: UInt64) {
        self.lines = line
        self.seq = seq
        self.ends = []
    }

    var lineCount: Int { self.ends.isEmpty ? 1 : self.ends.count }

    func lineStart(_ i: Int) -> Int {
        i == 0 ? 0 : self.ends.isEmpty ? self.lines.readableBytes : self.ends[i - 1]
    }

    /// Lines `ends` of `lines` (from `seq`) as a batch that the queues and the replay ring can
    /// keep: their slices live on there, and those count only their lines' bytes, so a buffer
    /// more than half unused (a read that brought less than the last) is replaced by one of the
    /// lines' size, and what they keep alive stays within twice their bounds.
    static func kept(_ lines: ByteBuffer, seq: UInt64, ends: [Int], allocator: ByteBufferAllocator) -> LineBatch {
        LineBatch(lines: lines.capacity > 2 * lines.readableBytes ? allocator.buffer(buffer: lines) : lines, seq: seq, ends: ends)
    }

    /// Lines `range` as one slice of the buffer (no copy).
    func slice(_ range: Range<Int>) -> ByteBuffer {
        let start = self.lineStart(range.lowerBound)
        return self.lines.getSlice(at: self.lines.readerIndex + start, length: self.lineStart(range.upperBound) - start)!
    }

    /// Each line as a slice of the buffer (no copy).
    func forEachLine(_ body: (UInt64, ByteBuffer) -> Void) {
        for i in 0..<self.lineCount {
            body(self.seq + UInt64(i), self.slice(i..<(i + 1)))
        }
    }
}

extension SubscriberQueue where Lines == LineBatch {
    /// A write's size: lines are taken from the queue up to this, and NIO holds no more than
    /// its high-water mark and one of these beyond what the queue bounds.
    static var batchBytes: Int { 64 * 1024 }
    /// Parts of runs smaller than this (a slow feed's few lines per read) are copied into one
    /// write; larger ones are written as they are (slices of the buffer shared with the other
    /// subscribers).
    static var copyBelow: Int { 8 * 1024 }

    /// The next bytes to write to the client, nil when nothing is queued: the replies and
    /// notices that come one after another, in one buffer (a client that sent many requests in
    /// one read gets their answers in one write; they are bounded by `local.client_output_bytes`);
    /// a `dropped` notice; or up to 64 KiB of message lines, a slice of one flush's buffer, or
    /// the small parts of several copied into one buffer.
    mutating func nextWrite(allocator: ByteBufferAllocator) -> ByteBuffer? {
        switch self.next(maxBytes: Self.batchBytes) {
        case nil:
            return nil
        case .control(let line):
            var lines = line.lines
            while self.controlComesFirst, case .control(let more)? = self.next() { lines.writeImmutableBuffer(more.lines) }
            return lines
        case .dropped(let d):
            return MessageLineEncoder.line(DroppedLine(count: d.count, from: d.from, to: d.to).json, allocator: allocator)
        case .messages(let lines, let range):
            let part = lines.slice(range)
            guard part.readableBytes < Self.copyBelow, self.messageBytes > 0 else { return part }
            var batch = allocator.buffer(capacity: min(Self.batchBytes, part.readableBytes + self.messageBytes))
            batch.writeImmutableBuffer(part)
            self.takeMessages(maxBytes: Self.batchBytes - batch.readableBytes) { lines, range in
                batch.writeImmutableBuffer(lines.slice(range))
            }
            return batch
        }
    }
}
