import NIOCore

/// What the spool file holds, kept beside it without touching it: the live records (queued,
/// not yet delivered) in order, how far the upstream has taken them, how far the file records
/// that, the file's size, and from these what the next write must be and when to compact.
/// The writer thread asks it before each write and tells it what the file took after; nothing
/// here does I/O, so every rule is tested without a disk.
struct SpoolLedger {
    struct Live {
        var entry: Spool.Entry
        /// The record's size in the file.
        var encodedBytes: Int
    }

    /// What the next write must do, for the appends it carries.
    enum Step: Equatable {
        /// Nothing to write.
        case none
        /// Nothing is live: the file is cut back to its header (no space needed).
        case cutToHeader
        /// One write: a delivered marker (when there is news to record), then the appends.
        case append(deliveredMarker: UInt64?)
    }

    private(set) var live = CircularBuffer<Live>()
    private(set) var liveBytes = 0
    /// The file's size, its header included.
    private(set) var fileSize: Int
    /// The highest id the upstream took, and the highest the file's delivered marker records.
    private(set) var deliveredThrough: UInt64 = 0
    private(set) var deliveredInFile: UInt64 = 0
    /// Dead records are compacted away once they outweigh the live ones and this.
    static let compactionSlack = 1 << 20

    init(fileSize: Int = SpoolFormat.headerSize) {
        self.fileSize = fileSize
    }

    /// The ledger of a file read back at start: its messages are live, in order.
    init(restoring contents: SpoolFormat.Contents, fileSize: Int) {
        self.fileSize = fileSize
        for m in contents.messages {
            self.add(Spool.Entry(id: m.id, kind: m.kind.message, data: m.payload))
        }
    }

    var entries: [Spool.Entry] { self.live.map(\.entry) }

    /// The file holds exactly the live records after its header (no delivered, damaged or
    /// torn ones): it needs no rewrite at start.
    var fileIsExact: Bool { self.fileSize == SpoolFormat.headerSize + self.liveBytes }

    /// Bytes of delivered (dead) records and markers the file still holds.
    var deadBytes: Int { self.fileSize - SpoolFormat.headerSize - self.liveBytes }

    /// Dead records outweigh the live ones and the slack: rewrite the file with the live ones.
    var shouldCompact: Bool { self.deadBytes > max(Self.compactionSlack, self.liveBytes) }

    /// Every message up to `id` went upstream: it leaves the live list.
    mutating func delivered(through id: UInt64) {
        self.deliveredThrough = max(self.deliveredThrough, id)
        while let first = self.live.first, first.entry.id <= self.deliveredThrough {
            self.liveBytes -= first.encodedBytes
            self.live.removeFirst()
        }
    }

    /// What to write for `appending` new records.
    func step(appending: Bool) -> Step {
        let news = self.deliveredThrough > self.deliveredInFile
        if self.live.isEmpty && !appending {
            return news && self.fileSize > SpoolFormat.headerSize ? .cutToHeader : .none
        }
        guard news || appending else { return .none }
        return .append(deliveredMarker: news ? self.deliveredThrough : nil)
    }

    /// The file took a write of `bytes` holding `entries` (and the marker `step` asked for).
    mutating func wrote(_ entries: [Spool.Entry], bytes: Int) {
        self.fileSize += bytes
        self.deliveredInFile = self.deliveredThrough
        for e in entries { self.add(e) }
    }

    /// The file was cut back to `size` and records everything delivered (its header only, or
    /// a rewrite with the live records alone).
    mutating func cut(to size: Int) {
        self.fileSize = size
        self.deliveredInFile = self.deliveredThrough
    }

    /// At start, with no room to rewrite: the file is kept as it was, cut at `size`, and its
    /// own marker says how far delivery went.
    mutating func keptAsIs(size: Int, deliveredThrough: UInt64) {
        self.fileSize = size
        self.deliveredThrough = deliveredThrough
        self.deliveredInFile = deliveredThrough
    }

    /// The bytes of a file holding exactly the live records.
    func compacted() -> ByteBuffer {
        var file = SpoolFormat.header()
        for live in self.live {
            SpoolFormat.write(kind: .init(live.entry.kind), id: live.entry.id, payload: live.entry.data, into: &file)
        }
        return file
    }

    private mutating func add(_ entry: Spool.Entry) {
        let live = Live(entry: entry, encodedBytes: SpoolFormat.recordOverhead + entry.data.readableBytes)
        self.live.append(live)
        self.liveBytes += live.encodedBytes
    }
}
