import Logging
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
/// The spool is a policy on the durable log engine (`LogWriter`, `LogRecord`): one writer
/// thread does all file I/O, so the event loop never waits for the disk. Appends that arrive
/// while it writes are written together with the next write and, with
/// `queue.fsync = "always"`, share one fdatasync (group commit); with "batch" a send is
/// answered once written, and the file is fdatasync'd within a second. A failed write or
/// fdatasync is undone (the file is cut back to where the batch began) and those sends are
/// refused, so the file never holds a message its sender was told was not queued.
///
/// This file: the face the link uses. Opening and recovery are in Spool+Open, a batch's
/// writing in `SpoolWriter`, the rules (what to write, when to compact) in `SpoolLedger`, and
/// the POSIX I/O in `SpoolFile`. The daemon-scope sticky keys' snapshot (`StickyStore`) is
/// written by the same thread, in the same order as everything else.
///
/// Compaction: the link reports the messages that went upstream (`delivered(through:)`). When
/// none is left the file is cut back to its header; while some are, it is rewritten (to a
/// temporary file, fdatasync'd, renamed over it) once the dead records outweigh the live ones
/// and 1 MiB. The live records are bounded by `queue.max_messages` and `queue.max_bytes`, so
/// the file stays below about twice that.
///
/// A lock file (`DIR/lock`, flock: `LogDirectory`) keeps a second daemon off the same spool.
final class Spool: Sendable {
    struct Entry: Sendable {
        var id: UInt64
        var kind: UpstreamMessage.Kind
        var data: ByteBuffer
    }

    typealias Failure = LogFailure

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

    enum Op: Sendable {
        case append(Entry)
        case delivered(UInt64)
        case sync
        case setFsync(Configuration.FsyncPolicy)
        /// Replaces the file at the path with the bytes (`DurableFile.replace`).
        case snapshot(String, ByteBuffer, EventLoopPromise<Void>)
        case close(EventLoopPromise<Void>)
    }

    /// What the loop's side reads and sets.
    struct Shared: Sendable {
        /// Told of each batch, on the event loop.
        var onStored: (@Sendable (Stored) -> Void)?
        var fileBytes: Int
        var fsyncs: UInt64 = 0
    }

    let directory: String
    let path: String
    private let eventLoop: any EventLoop
    private let log: LogWriter<SpoolWriter>
    /// The batch policy's longest wait between a write and its fdatasync.
    static let batchSyncDelay: TimeAmount = .seconds(1)

    init(eventLoop: any EventLoop, writer: SpoolWriter) {
        self.directory = writer.file.directory.path
        self.path = writer.file.path
        self.eventLoop = eventLoop
        self.log = LogWriter(writer, shared: Shared(fileBytes: writer.ledger.fileSize), syncDelay: Self.batchSyncDelay, eventLoop: eventLoop)
    }

    /// Sets what is told, on the event loop, once appends are in the file as `queue.fsync`
    /// defines it (or were refused): once per batch, in order.
    func whenStored(_ handler: (@Sendable (Stored) -> Void)?) {
        self.log.submit { $0.shared.onStored = handler }
    }

    /// Stores a message (ids must rise); `whenStored`'s handler says when it is stored.
    func append(_ entry: Entry) {
        self.log.submit(.append(entry))
    }

    /// Every message with an id up to `id` went upstream: it need not be replayed.
    func delivered(through id: UInt64) {
        self.log.submit(.delivered(id))
    }

    func setFsync(_ policy: Configuration.FsyncPolicy) {
        self.log.submit(.setFsync(policy))
    }

    /// Replaces `path` (a file in the spool's directory) with `bytes`, on the spool's writer
    /// thread; the future succeeds once the new file is on disk.
    func saveSnapshot(_ bytes: ByteBuffer, to path: String) -> EventLoopFuture<Void> {
        let promise = self.eventLoop.makePromise(of: Void.self)
        self.log.submit(.snapshot(path, bytes, promise))
        return promise.futureResult
    }

    /// The file's size, and how many fdatasyncs it has cost.
    var fileStatistics: (bytes: Int, fsyncs: UInt64) {
        self.log.withShared { ($0.fileBytes, $0.fsyncs) }
    }

    /// Writes what is pending, fdatasyncs, closes the file and stops the writer thread. The
    /// messages still queued stay in the file for the next start.
    func close() -> EventLoopFuture<Void> {
        let promise = self.eventLoop.makePromise(of: Void.self)
        self.log.submit(.close(promise))
        return promise.futureResult.flatMap {
            // Every report is on its way to the loop by now; the handler (and the link it
            // holds) is let go.
            self.whenStored(nil)
            return self.log.shutdown()
        }
    }
}
