import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// What one durable log writes, on its writer thread: the spool (`SpoolWriter`) and the
/// journal (`JournalWriter`) are policies on `LogWriter`, which owns the thread, the queue and
/// the group commit.
protocol LogPolicy: Sendable {
    associatedtype Op: Sendable
    /// What the event loop's side keeps beside the queue (statistics, handlers), under its lock.
    associatedtype Shared: Sendable
    /// The op that asks for the fdatasync a batch left due.
    static var sync: Op { get }
    /// Writes one batch of ops, in order. Runs on the writer thread alone.
    mutating func write(_ ops: [Op]) -> LogBatch<Shared>
}

/// What follows a written batch.
struct LogBatch<Shared>: Sendable {
    /// Applied to the shared state under the queue's lock; what it returns runs after, off the
    /// lock (reports to the event loop, promises).
    var apply: @Sendable (inout Shared) -> (@Sendable () -> Void)?
    /// Written and not fdatasync'd (`fsync = "batch"`): a sync is due within the log's delay.
    var syncDue = false
    /// The log is closed: no further sync is scheduled.
    var closed = false
}

/// The single writer of a durable log. The event loop hands ops over (`submit`) and never waits
/// for the disk; one thread takes every op waiting and writes them as one batch, so appends
/// that arrive while it writes share the next write and its fdatasync (group commit). With
/// `fsync = "batch"`, a batch that leaves data unsynced schedules one `Policy.sync` after
/// `syncDelay` (one at a time, none while idle).
final class LogWriter<Policy: LogPolicy>: Sendable {
    /// The ops waiting, and the shared state, under one lock.
    struct Queue {
        var ops: [Policy.Op] = []
        var shared: Policy.Shared
        /// The policy closed the log.
        fileprivate(set) var closed = false
        fileprivate var draining = false
        fileprivate var syncScheduled = false
    }

    private let queue: NIOLockedValueBox<Queue>
    /// Touched only by the writer thread (the lock is never contended; it makes that checkable).
    private let policy: NIOLockedValueBox<Policy>
    private let pool = NIOThreadPool(numberOfThreads: 1)
    private let eventLoop: any EventLoop
    private let syncDelay: TimeAmount

    init(_ policy: Policy, shared: Policy.Shared, syncDelay: TimeAmount, eventLoop: any EventLoop) {
        self.queue = NIOLockedValueBox(Queue(shared: shared))
        self.policy = NIOLockedValueBox(policy)
        self.syncDelay = syncDelay
        self.eventLoop = eventLoop
        self.pool.start()
    }

    /// Hands `op` to the writer.
    func submit(_ op: Policy.Op) {
        self.submit { $0.ops.append(op) }
    }

    /// Runs `body` on the queue under its lock (to add ops, and read or change the shared
    /// state with them); the writer starts if ops wait.
    @discardableResult
    func submit<T>(_ body: (inout Queue) -> T) -> T {
        let (result, start) = self.queue.withLockedValue { q -> (T, Bool) in
            let result = body(&q)
            guard !q.ops.isEmpty, !q.draining else { return (result, false) }
            q.draining = true
            return (result, true)
        }
        if start {
            // After `shutdown` the pool runs nothing: the ops are handed to the policy here,
            // which answers them as a closed log does.
            self.pool.submit { _ in self.drain() }
        }
        return result
    }

    /// Reads the shared state.
    func withShared<T>(_ body: (Policy.Shared) -> T) -> T {
        self.queue.withLockedValue { body($0.shared) }
    }

    /// Stops the writer thread once what it was given is done (after the policy's close).
    func shutdown() -> EventLoopFuture<Void> {
        let done = self.eventLoop.makePromise(of: Void.self)
        self.pool.shutdownGracefully { _ in done.succeed(()) }
        return done.futureResult
    }

    /// Every op handed over, in order, a batch at a time, until none is left.
    private func drain() {
        while true {
            let ops = self.queue.withLockedValue { q -> [Policy.Op] in
                if q.ops.isEmpty { q.draining = false }
                defer { q.ops.removeAll(keepingCapacity: true) }
                return q.ops
            }
            if ops.isEmpty { return }
            let batch = self.policy.withLockedValue { $0.write(ops) }
            let then = self.queue.withLockedValue { q in
                if batch.closed { q.closed = true }
                return batch.apply(&q.shared)
            }
            then?()
            if batch.syncDue { self.scheduleSync() }
        }
    }

    private func scheduleSync() {
        let first = self.queue.withLockedValue { q -> Bool in
            guard !q.syncScheduled, !q.closed else { return false }
            q.syncScheduled = true
            return true
        }
        guard first else { return }
        self.eventLoop.scheduleTask(in: self.syncDelay) {
            self.submit { q in
                q.syncScheduled = false
                if !q.closed { q.ops.append(Policy.sync) }
            }
        }
    }
}
