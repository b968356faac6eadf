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
/// This file: the public face and the hand-off between the event loop and the writer thread.
/// Opening and recovery are in Spool+Open, a batch's writing in Spool+Writer, the rules
/// (what to write, when to compact) in `SpoolLedger`, and the POSIX I/O in `SpoolFile`.
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
    let path: String
    private let eventLoop: any EventLoop
    let logger: Logger
    private let pool: NIOThreadPool
    private let shared: NIOLockedValueBox<Shared>
    /// Touched only by the writer thread (the lock is never contended; it makes that checkable).
    private let writer: NIOLockedValueBox<Writer>
    /// The batch policy's longest wait between a write and its fdatasync.
    static let batchSyncDelay: TimeAmount = .seconds(1)

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

    enum Op {
        case append(Entry)
        case delivered(UInt64)
        case sync
        case close(EventLoopPromise<Void>)
    }

    /// The writer thread's state: the file and its ledger (Spool+Writer.swift).
    struct Writer {
        var file: SpoolFile
        var ledger: SpoolLedger
        /// Written since the last fdatasync.
        var dirty = false
    }

    init(fsync: Configuration.FsyncPolicy, eventLoop: any EventLoop, logger: Logger, writer: Writer) {
        self.directory = writer.file.directory
        self.path = writer.file.path
        self.eventLoop = eventLoop
        self.logger = logger
        self.shared = NIOLockedValueBox(Shared(policy: fsync, fileBytes: writer.ledger.fileSize))
        self.writer = NIOLockedValueBox(writer)
        self.pool = NIOThreadPool(numberOfThreads: 1)
        self.pool.start()
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
}
