import Logging
import NIOCore
import NIOPosix
import WSBridgeCore

#if canImport(Glibc)
    import Glibc
#endif

/// The journal of upstream messages (`[journal]`, docs/journal.md): every message the fan-out
/// numbers is appended, in batches, to segment files (see `JournalFormat`), so a consumer
/// resumes from it after a daemon restart or after longer than the replay ring keeps.
///
/// The fan-out never waits for the disk: it hands each read's messages over (`append`), and
/// one writer thread writes them, rolls segments and removes old ones (retention); with
/// `fsync = "batch"` it fdatasyncs at most every `fsync_interval`, only after writes (an idle
/// daemon has no timer), with "always" after every batch. Messages waiting beyond
/// `buffer_bytes` (a disk slower than the feed), or a write that fails (a full disk), are not
/// journaled: a hole record says so, and the journal tries again at the next messages after
/// `retryDelay`. A reader thread serves replays (`read`), so a consumer replaying a gigabyte
/// costs the writer and the live feed nothing.
///
/// The journal is a policy on the durable log engine (`LogWriter`, `LogRecord`), as the spool
/// is. This file: the face the fan-out uses. Opening and recovery are in Journal+Open, the
/// writer's policy in `JournalWriter`, the reader in Journal+Reader.
final class Journal: Sendable {
    /// A message as the fan-out numbered it.
    struct Entry: Sendable {
        var seq: UInt64
        var message: UpstreamMessage
        /// A fleet follower's app it is for (`holder/app`, FleetRemoteApps): it goes into the
        /// fleet's stream only, never into the journal.
        var to: String? = nil
    }

    typealias Failure = LogFailure

    /// What the daemon's last run left (Journal+Open).
    struct Recovered: Sendable {
        /// The stream this run counts in: the last one's after a clean stop, a new one after a
        /// crash (the messages numbered after `lastSeq` may have reached consumers without
        /// reaching the disk, so the same seq must not name a new message in the same stream).
        var stream: UInt64
        var lastSeq: UInt64
        var clean: Bool
        /// After a crash: the stream the last run counted in.
        var previousStream: UInt64?
        /// No message was journaled before this run.
        var fresh = false

        /// How this run began, as status says it: `new`, `continued` or `after_crash`.
        var opened: String { self.fresh ? "new" : self.clean ? "continued" : "after_crash" }
    }

    /// A segment as the reader and the status see it.
    struct Segment: Sendable, Equatable {
        var firstSeq: UInt64
        var stream: UInt64
        var createdMillis: Int64
        /// Bytes written (and readable).
        var size: Int
        /// The last seq written to it (firstSeq - 1 while it has none).
        var lastSeq: UInt64
        var lastMillis: Int64
    }

    struct Statistics: Sendable, Equatable {
        var bytes = 0
        var segments = 0
        var oldestSeq: UInt64?
        var newestSeq: UInt64?
        var oldestMillis: Int64?
        var newestMillis: Int64?
        var fsyncs: UInt64 = 0
        /// Messages never written (a full buffer, a failed write).
        var notJournaled: UInt64 = 0
        /// Why the journal is not writing now, if it is not.
        var stopped: String?
    }

    enum Op: Sendable {
        case entries([Entry], bytes: Int)
        case hole(from: UInt64, to: UInt64)
        case sync
        case close(lastSeq: UInt64, EventLoopPromise<Void>)
        /// Completed once every earlier op is done.
        case barrier(EventLoopPromise<Void>)
    }

    /// What the loop's side reads and sets, beside the writer's queue.
    struct Shared: Sendable {
        var pendingBytes = 0
        /// Oldest first; the last is the one written to.
        var segments: [Segment]
        var fsyncs: UInt64 = 0
        var notJournaled: UInt64 = 0
        var stopped: (reason: String, at: NIODeadline)?
        /// The writer is `buffer_bytes` behind: messages are not journaled (logged once).
        var overflowing = false
        var onWritten: (@Sendable (UInt64) -> Void)?
        /// The last seq handed over (written, or a hole): where `close()` marks the clean stop.
        var lastHandedOver: UInt64
    }

    let directory: String
    let configuration: Configuration.Journal
    let stream: UInt64
    /// What the last run left, as this one found it.
    let recovered: Recovered
    let logger: Logger
    let eventLoop: any EventLoop
    private let log: LogWriter<JournalWriter>
    private let readerPool = NIOThreadPool(numberOfThreads: 1)
    /// How long a stopped journal (a failed write) waits before it tries again.
    static let retryDelay: TimeAmount = .seconds(10)

    init(eventLoop: any EventLoop, writer: JournalWriter, recovered: Recovered) {
        self.recovered = recovered
        self.configuration = writer.configuration
        self.directory = writer.directory.path
        self.stream = writer.stream
        self.eventLoop = eventLoop
        self.logger = writer.logger
        self.log = LogWriter(
            writer, shared: Shared(segments: writer.segments, lastHandedOver: writer.segments.last?.lastSeq ?? 0),
            syncDelay: .nanoseconds(writer.configuration.fsyncInterval.nanoseconds),
            eventLoop: eventLoop)
        self.readerPool.start()
        // Replays are background work: the reader thread runs at nice 10 (a tenth of a nice-0
        // thread's weight), so a consumer catching up yields to the live feed. Not nice 19: on a
        // busy host (16 busy loops on 2 cores) its 1/70 share left a consumer resuming after a
        // crash 17.8 s from its first 300 messages, 0.95 s at nice 10; the live p99 beside a
        // replay measured the same either way (docs/journal.md). (On Linux the nice value is per
        // thread: `who` 0 is this thread alone.)
        self.readerPool.submit { _ in _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 10) }
    }

    /// The stream as `hello` and `subscribe` show it.
    var streamID: String { Self.streamID(self.stream) }

    static func streamID(_ stream: UInt64) -> String {
        let hex = String(stream, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }

    // MARK: - The loop's side

    /// Told, on the event loop, the last seq written after each write.
    func whenWritten(_ handler: (@Sendable (UInt64) -> Void)?) {
        self.log.submit { $0.shared.onWritten = handler }
    }

    /// Hands over one read's messages (seqs rising by one from the last handed over).
    func append(_ entries: [Entry]) {
        guard let first = entries.first, let last = entries.last else { return }
        let bytes = entries.reduce(0) { $0 + $1.message.data.readableBytes + JournalFormat.recordOverhead }
        self.log.submit { q in
            guard !q.closed else { return }
            q.shared.lastHandedOver = max(q.shared.lastHandedOver, last.seq)
            if let stopped = q.shared.stopped, NIODeadline.now() < stopped.at + Self.retryDelay {
                q.shared.notJournaled += UInt64(entries.count)
                Self.addHole(&q.ops, from: first.seq, to: last.seq)
                return
            }
            if q.shared.pendingBytes + bytes > self.configuration.bufferBytes {
                if !q.shared.overflowing {
                    q.shared.overflowing = true
                    self.logger.error(
                        "journal: the writer is \(q.shared.pendingBytes) bytes behind (journal.buffer_bytes = \(self.configuration.bufferBytes)): messages from seq \(first.seq) are not journaled until it catches up; is \(self.directory) on a slow or failing disk?"
                    )
                }
                q.shared.notJournaled += UInt64(entries.count)
                Self.addHole(&q.ops, from: first.seq, to: last.seq)
                return
            }
            q.shared.overflowing = false
            q.shared.pendingBytes += bytes
            q.ops.append(.entries(entries, bytes: bytes))
        }
    }

    /// A hole alone is written before the next messages that are (the writer takes it then).
    private static func addHole(_ ops: inout [Op], from: UInt64, to: UInt64) {
        if case .hole(let f, let t)? = ops.last, t + 1 == from {
            ops[ops.count - 1] = .hole(from: f, to: to)
        } else {
            ops.append(.hole(from: from, to: to))
        }
    }

    /// Every seq up to `seq` was numbered (some went to one app alone and were not handed
    /// over): `close()` marks the clean stop after it, the ones never written a hole.
    func numbered(through seq: UInt64) {
        self.log.submit { $0.shared.lastHandedOver = max($0.shared.lastHandedOver, seq) }
    }

    /// Writes what is pending, marks the clean stop after the last message handed over,
    /// fdatasyncs and closes. The next start continues the same stream.
    func close() -> EventLoopFuture<Void> {
        self.close(lastSeq: self.log.withShared { $0.lastHandedOver })
    }

    /// Writes what is pending, marks the clean stop after `lastSeq` (the last message the
    /// fan-out numbered), fdatasyncs and closes. The next start continues the same stream.
    func close(lastSeq: UInt64) -> EventLoopFuture<Void> {
        let promise = self.eventLoop.makePromise(of: Void.self)
        self.log.submit(.close(lastSeq: lastSeq, promise))
        let (log, readerPool) = (self.log, self.readerPool)
        return promise.futureResult.flatMap {
            self.whenWritten(nil)
            return log.shutdown().flatMap {
                let done = self.eventLoop.makePromise(of: Void.self)
                readerPool.shutdownGracefully { _ in done.succeed(()) }
                return done.futureResult
            }
        }
    }

    /// Completes once everything handed over before it was written (or failed).
    func barrier() -> EventLoopFuture<Void> {
        let promise = self.eventLoop.makePromise(of: Void.self)
        self.log.submit(.barrier(promise))
        return promise.futureResult
    }

    var statistics: Statistics {
        self.log.withShared { s in
            var st = Statistics()
            st.segments = s.segments.count
            st.bytes = s.segments.reduce(0) { $0 + $1.size }
            let written = s.segments.filter { $0.lastSeq >= $0.firstSeq }
            st.oldestSeq = written.first?.firstSeq
            st.newestSeq = written.last?.lastSeq
            st.oldestMillis = written.first?.createdMillis
            st.newestMillis = written.last?.lastMillis
            st.fsyncs = s.fsyncs
            st.notJournaled = s.notJournaled
            st.stopped = s.stopped?.reason
            return st
        }
    }

    /// The last seq written (or recorded as a hole).
    var writtenThrough: UInt64 { self.log.withShared { $0.segments.last?.lastSeq ?? 0 } }

    var isStopped: Bool { self.log.withShared { $0.stopped != nil } }

    var segments: [Segment] { self.log.withShared { $0.segments } }

    func submitRead<T: Sendable>(_ body: @escaping @Sendable () -> T) -> EventLoopFuture<T> {
        self.readerPool.runIfActive(eventLoop: self.eventLoop, body)
    }
}
