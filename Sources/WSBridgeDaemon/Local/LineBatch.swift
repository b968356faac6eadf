import NIOCore
import WSBridgeCore

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

    /// The same lines in a buffer of their size.
    func copied(_ allocator: ByteBufferAllocator) -> LineBatch {
        LineBatch(lines: allocator.buffer(buffer: self.lines), seq: self.seq, ends: self.ends)
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
