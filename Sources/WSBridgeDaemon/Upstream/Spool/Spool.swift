import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import WSBridgeCore

#if canImport(Glibc)
    import Glibc
#endif

/// The durable outbound spool (`queue.spool`): sends queued while the link cannot take them
/// are appended to `DIR/outbound.log` (see `SpoolFormat`) before they are answered `queued`,
/// and read back in order when the daemon starts again, after a crash, a `kill -9` or a
/// restart alike.
///
/// One writer thread does all file I/O, so the event loop never waits for the disk. Appends
/// that arrive while it writes are written together with the next write and, with
/// `queue.fsync = "always"`, share one fdatasync (group commit); with "batch" a send is
/// answered once written, and the file is fdatasync'd within a second. A failed write or
/// fdatasync is undone (the file is cut back to where the batch began) and those sends are
/// refused, so the file never holds a message its sender was told was not queued.
///
/// Compaction: the link reports the messages that went upstream (`delivered(through:)`). When
/// none is left the file is cut back to its header; while some are, it is rewritten (to a
/// temporary file, fdatasync'd, renamed over it) once the dead records outweigh the live ones
/// and 1 MiB. The live records are bounded by `queue.max_messages` and `queue.max_bytes`, so
/// the file stays below about twice that.
///
/// A lock file (`DIR/lock`, flock) keeps a second daemon off the same spool.
final class Spool: Sendable {
    struct Entry: Sendable {
        var id: UInt64
        var kind: UpstreamMessage.Kind
        var data: ByteBuffer
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// What became of the appends up to `through` (every earlier one has been reported):
    /// stored, or, with `failure`, refused and not in the file. Reported once per batch.
    struct Stored: Sendable {
        var through: UInt64
        var failure: Failure?
    }

    /// What `open` found in the spool, to queue again in order.
    struct Restored {
        var entries: [Entry]
        /// The next message takes a higher id than this.
        var lastID: UInt64
    }

    let directory: String
    private let path: String
    private let eventLoop: any EventLoop
    private let logger: Logger
    private let pool: NIOThreadPool
    private let shared: NIOLockedValueBox<Shared>
    /// Touched only by the writer thread (the lock is never contended; it makes that checkable).
    private let writer: NIOLockedValueBox<Writer>
    /// The batch policy's longest wait between a write and its fdatasync.
    static let batchSyncDelay: TimeAmount = .seconds(1)
    /// Dead records are compacted away once they outweigh the live ones and this.
    static let compactionSlack = 1 << 20

    private struct Shared {
        var ops: [Op] = []
        /// Told of each batch, on the event loop.
        var onStored: (@Sendable (Stored) -> Void)?
        var draining = false
        var policy: Configuration.FsyncPolicy
        var syncScheduled = false
        var fileBytes: Int
        var fsyncs: UInt64 = 0
    }

    private enum Op {
        case append(Entry)
        case delivered(UInt64)
        case sync
        case close(EventLoopPromise<Void>)
    }

    private struct Writer {
        var fd: CInt
        var lockFD: CInt
        var size: Int
        var live = CircularBuffer<Live>()
        var liveBytes = 0
        /// Written since the last fdatasync.
        var dirty = false
        /// The highest delivered id reported, and the highest the file records.
        var deliveredThrough: UInt64 = 0
        var deliveredInFile: UInt64 = 0
    }

    private struct Live {
        var entry: Entry
        var encodedBytes: Int
    }

    private init(directory: String, fsync: Configuration.FsyncPolicy, eventLoop: any EventLoop, logger: Logger, writer: Writer) {
        self.directory = directory
        self.path = directory + "/outbound.log"
        self.eventLoop = eventLoop
        self.logger = logger
        self.shared = NIOLockedValueBox(Shared(policy: fsync, fileBytes: writer.size))
        self.writer = NIOLockedValueBox(writer)
        self.pool = NIOThreadPool(numberOfThreads: 1)
        self.pool.start()
    }

    // MARK: - Opening

    /// Opens (creating it if needed) and reads the spool in `directory`. Blocks: call off the
    /// event loop. Skipped records and a torn tail are logged, and the file is rewritten
    /// without them before anything new is appended.
    static func open(
        directory: String, fsync: Configuration.FsyncPolicy, eventLoop: any EventLoop, logger: Logger
    ) throws(Failure) -> (Spool, Restored) {
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            let e = errno
            throw Failure(
                description:
                    "cannot create the spool directory \(directory) (queue.spool): \(Self.describe(e)); create it writable for the daemon's user (the units' StateDirectory=wsbridged makes /var/lib/wsbridged so)"
            )
        }
        let lockFD = Glibc.open(directory + "/lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard lockFD >= 0 else {
            throw Failure(
                description: "cannot open \(directory)/lock (queue.spool): \(Self.describe(errno)); the spool directory must be writable for the daemon's user")
        }
        guard flock(lockFD, LOCK_EX | LOCK_NB) == 0 else {
            let e = errno
            Glibc.close(lockFD)
            if e == EWOULDBLOCK {
                throw Failure(
                    description:
                        "the spool \(directory) (queue.spool) is in use by another wsbridged: give each instance its own queue.spool (for example /var/lib/wsbridged/NAME/spool)"
                )
            }
            throw Failure(description: "cannot lock \(directory)/lock (queue.spool): \(Self.describe(e))")
        }
        let path = directory + "/outbound.log"
        // A compaction cut short leaves its temporary file; the log itself is still whole.
        unlink(path + ".tmp")
        let fd = Glibc.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            let e = errno
            Glibc.close(lockFD)
            throw Failure(description: "cannot open \(path) (queue.spool): \(Self.describe(e))")
        }
        let contents: SpoolFormat.Contents
        let fileSize: Int
        do {
            let file = try Self.readAll(fd, path: path)
            fileSize = file.readableBytes
            contents = try SpoolFormat.read(file)
        } catch let problem as SpoolFormat.HeaderProblem {
            Glibc.close(fd)
            Glibc.close(lockFD)
            throw Failure(description: "\(path) (queue.spool): \(problem); move it away, or point queue.spool at another directory")
        } catch {
            Glibc.close(fd)
            Glibc.close(lockFD)
            throw Failure(description: "\(error)")
        }
        for skipped in contents.skipped {
            logger.error("spool: \(path): skipped a damaged record at offset \(skipped.offset): \(skipped.problem); one queued message is lost")
        }
        if let cut = contents.truncatedAt {
            logger.error(
                "spool: \(path): truncated at offset \(cut.offset), dropping \(contents.discardedBytes) byte(s): \(cut.problem); every record before it is kept"
            )
        }
        var writer = Writer(fd: fd, lockFD: lockFD, size: fileSize)
        for m in contents.messages {
            let entry = Entry(id: m.id, kind: m.kind.message, data: m.payload)
            writer.live.append(Live(entry: entry, encodedBytes: SpoolFormat.recordOverhead + m.payload.readableBytes))
            writer.liveBytes += SpoolFormat.recordOverhead + m.payload.readableBytes
        }
        // Start from a clean file: only the live records, in order (drops delivered, damaged
        // and torn ones), unless it is exactly that already.
        if fileSize != SpoolFormat.headerSize + writer.liveBytes || !contents.skipped.isEmpty {
            do {
                try Self.rewrite(&writer, path: path)
            } catch {
                // No room for a second copy (a full disk): keep the file, cut off its torn tail
                // in place (which needs no space), and append after it. Delivered and skipped
                // records stay and are passed over again at the next start.
                let keep = contents.truncatedAt?.offset ?? fileSize
                guard fileSize >= SpoolFormat.headerSize, ftruncate(fd, off_t(keep)) == 0 else {
                    Glibc.close(writer.fd)
                    Glibc.close(lockFD)
                    throw error
                }
                logger.warning("spool: could not rewrite \(path) (\(error)); kept it as it is, cut at offset \(keep)")
                writer.size = keep
                writer.deliveredThrough = contents.deliveredThrough
                writer.deliveredInFile = contents.deliveredThrough
            }
        }
        let spool = Spool(directory: directory, fsync: fsync, eventLoop: eventLoop, logger: logger, writer: writer)
        let entries = Array(writer.live.map(\.entry))
        if !entries.isEmpty {
            logger.notice(
                "spool: \(entries.count) queued message(s) (\(writer.liveBytes) bytes) restored from \(path); they go upstream first, in order",
                metadata: ["spool.messages": "\(entries.count)"]
            )
        }
        return (spool, Restored(entries: entries, lastID: max(contents.lastID, contents.deliveredThrough)))
    }

    private static func readAll(_ fd: CInt, path: String) throws(Failure) -> ByteBuffer {
        var file = ByteBuffer()
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        var offset: off_t = 0
        while true {
            let n = chunk.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, offset) }
            if n < 0 {
                if errno == EINTR { continue }
                throw Failure(description: "cannot read \(path) (queue.spool): \(Self.describe(errno))")
            }
            if n == 0 { return file }
            file.writeBytes(chunk[0..<n])
            offset += off_t(n)
        }
    }

    // MARK: - The loop's side

    /// Sets what is told, on the event loop, once appends are in the file as `queue.fsync`
    /// defines it (or were refused): once per batch, in order.
    func whenStored(_ handler: (@Sendable (Stored) -> Void)?) {
        self.shared.withLockedValue { $0.onStored = handler }
    }

    /// Stores a message (ids must rise); `whenStored`'s handler says when it is stored.
    func append(_ entry: Entry) {
        self.enqueue(.append(entry))
    }

    /// Every message with an id up to `id` went upstream: it need not be replayed.
    func delivered(through id: UInt64) {
        self.enqueue(.delivered(id))
    }

    func setFsync(_ policy: Configuration.FsyncPolicy) {
        self.shared.withLockedValue { $0.policy = policy }
    }

    /// The file's size, and how many fdatasyncs it has cost.
    var fileStatistics: (bytes: Int, fsyncs: UInt64) {
        self.shared.withLockedValue { ($0.fileBytes, $0.fsyncs) }
    }

    /// Writes what is pending, fdatasyncs, closes the file and stops the writer thread. The
    /// messages still queued stay in the file for the next start.
    func close() -> EventLoopFuture<Void> {
        let promise = self.eventLoop.makePromise(of: Void.self)
        self.enqueue(.close(promise))
        let pool = self.pool
        return promise.futureResult.flatMap {
            // Every report is on its way to the loop by now; the handler (and the link it
            // holds) is let go.
            self.whenStored(nil)
            let done = self.eventLoop.makePromise(of: Void.self)
            pool.shutdownGracefully { _ in done.succeed(()) }
            return done.futureResult
        }
    }

    private func enqueue(_ op: Op) {
        let start = self.shared.withLockedValue { s -> Bool in
            s.ops.append(op)
            if s.draining { return false }
            s.draining = true
            return true
        }
        guard start else { return }
        self.pool.submit { state in
            guard state == .active else {
                self.failEverything("wsbridged is stopping")
                return
            }
            self.drain()
        }
    }

    private func failEverything(_ why: String) {
        let ops = self.shared.withLockedValue { s -> [Op] in
            defer {
                s.ops = []
                s.draining = false
            }
            return s.ops
        }
        for op in ops {
            switch op {
            case .append(let e): self.report(Stored(through: e.id, failure: Failure(description: "the spool is closed (\(why))")))
            case .close(let p): p.succeed(())
            case .delivered, .sync: break
            }
        }
    }

    private func report(_ stored: Stored) {
        guard let handler = self.shared.withLockedValue({ $0.onStored }) else { return }
        self.eventLoop.execute { handler(stored) }
    }

    // MARK: - The writer thread

    private func drain() {
        while true {
            let (ops, policy) = self.shared.withLockedValue { s -> ([Op], Configuration.FsyncPolicy) in
                if s.ops.isEmpty { s.draining = false }
                defer { s.ops.removeAll(keepingCapacity: true) }
                return (s.ops, s.policy)
            }
            if ops.isEmpty { return }
            let (size, fsyncs, scheduleSync, stored) = self.writer.withLockedValue { w in self.process(ops, policy: policy, &w) }
            self.shared.withLockedValue { s in
                s.fileBytes = size
                s.fsyncs += fsyncs
            }
            if let stored { self.report(stored) }
            if scheduleSync { self.scheduleBatchSync() }
        }
    }

    private func scheduleBatchSync() {
        let first = self.shared.withLockedValue { s -> Bool in
            defer { s.syncScheduled = true }
            return !s.syncScheduled
        }
        guard first else { return }
        self.eventLoop.scheduleTask(in: Self.batchSyncDelay) {
            self.shared.withLockedValue { $0.syncScheduled = false }
            self.enqueue(.sync)
        }
    }

    /// One batch: appends (and at most one delivered record) in one write, then the fsync the
    /// policy asks for. Returns the file size, fdatasyncs done, whether a batch fdatasync is
    /// due, and what to report of the appends.
    private func process(_ ops: [Op], policy: Configuration.FsyncPolicy, _ w: inout Writer) -> (Int, UInt64, Bool, Stored?) {
        var appends: [Entry] = []
        var deliveredThrough: UInt64 = 0
        var syncAsked = false
        var closes: [EventLoopPromise<Void>] = []
        for op in ops {
            switch op {
            case .append(let e): appends.append(e)
            case .delivered(let id): deliveredThrough = max(deliveredThrough, id)
            case .sync: syncAsked = true
            case .close(let p): closes.append(p)
            }
        }
        var fsyncs: UInt64 = 0
        let through = appends.last?.id
        guard w.fd >= 0 else {
            for p in closes { p.succeed(()) }
            return (w.size, 0, false, through.map { Stored(through: $0, failure: Failure(description: "the spool is closed (wsbridged is stopping)")) })
        }
        var refused: Failure?
        // Delivered messages leave the live list; their record is written only if some stay.
        w.deliveredThrough = max(w.deliveredThrough, deliveredThrough)
        while let first = w.live.first, first.entry.id <= w.deliveredThrough {
            w.liveBytes -= first.encodedBytes
            w.live.removeFirst()
        }
        let deliveredNews = w.deliveredThrough > w.deliveredInFile
        if w.live.isEmpty && appends.isEmpty {
            if deliveredNews && w.size > SpoolFormat.headerSize {
                self.truncate(&w, to: SpoolFormat.headerSize)
                self.logger.debug("spool: everything queued went upstream; \(self.path) is cut back to its header")
            }
        } else if deliveredNews || !appends.isEmpty {
            var batch = ByteBuffer()
            if deliveredNews { SpoolFormat.write(kind: .delivered, id: w.deliveredThrough, payload: nil, into: &batch) }
            for e in appends {
                SpoolFormat.write(kind: .init(e.kind), id: e.id, payload: e.data, into: &batch)
            }
            let before = w.size
            var failure: String?
            if let problem = DurableFile.writeAll(w.fd, batch, at: before) {
                failure = "cannot write \(self.path): \(problem)"
            } else if policy == .always {
                if fdatasync(w.fd) == 0 {
                    fsyncs += 1
                    w.dirty = false
                } else {
                    failure = "cannot fdatasync \(self.path): \(Self.describe(errno))"
                }
            } else {
                w.dirty = true
            }
            if let failure {
                // Undo the batch, so the file never holds what was refused.
                _ = ftruncate(w.fd, off_t(before))
                self.logger.error("spool: \(failure); \(appends.count) send(s) refused")
                refused = Failure(
                    description: "the message could not be stored in the spool (\(failure)); it was not queued: free space in \(self.directory), then retry"
                )
                appends = []
            } else {
                w.size += batch.readableBytes
                w.deliveredInFile = w.deliveredThrough
                for e in appends {
                    let live = Live(entry: e, encodedBytes: SpoolFormat.recordOverhead + e.data.readableBytes)
                    w.live.append(live)
                    w.liveBytes += live.encodedBytes
                }
            }
            let dead = w.size - SpoolFormat.headerSize - w.liveBytes
            if dead > max(Self.compactionSlack, w.liveBytes) {
                do {
                    try Self.rewrite(&w, path: self.path)
                    fsyncs += 2
                } catch {
                    self.logger.error("spool: compaction failed, the file keeps its delivered records for now: \(error)")
                }
            }
        }
        if w.dirty && (syncAsked || !closes.isEmpty || policy == .always) {
            if fdatasync(w.fd) == 0 {
                fsyncs += 1
                w.dirty = false
            } else {
                self.logger.error("spool: cannot fdatasync \(self.path): \(Self.describe(errno))")
            }
        }
        if !closes.isEmpty {
            Glibc.close(w.fd)
            Glibc.close(w.lockFD)
            w.fd = -1
            for p in closes { p.succeed(()) }
        }
        return (w.size, fsyncs, w.dirty && closes.isEmpty, through.map { Stored(through: $0, failure: refused) })
    }

    private func truncate(_ w: inout Writer, to size: Int) {
        if ftruncate(w.fd, off_t(size)) == 0 {
            w.size = size
            w.dirty = true
            w.deliveredInFile = w.deliveredThrough
        } else {
            self.logger.error("spool: cannot truncate \(self.path): \(Self.describe(errno))")
        }
    }

    /// Writes the live records to a new file, fdatasyncs it, and renames it over the log.
    private static func rewrite(_ w: inout Writer, path: String) throws(Failure) {
        var file = SpoolFormat.header()
        for live in w.live {
            let e = live.entry
            SpoolFormat.write(kind: .init(e.kind), id: e.id, payload: e.data, into: &file)
        }
        let fd: CInt
        do {
            fd = try DurableFile.replace(path, with: file)
        } catch {
            throw Failure(description: error.description)
        }
        Glibc.close(w.fd)
        w.fd = fd
        w.size = file.readableBytes
        w.dirty = false
        w.deliveredInFile = w.deliveredThrough
    }

    static func describe(_ code: CInt) -> String {
        DurableFile.describe(code)
    }
}
