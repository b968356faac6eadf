import Logging
import NIOCore
import NIOWebSocket
import WSBridgeCore
import WSBridgeProtocol

/// The link's outbound path: the bounded queue, the spool behind it, the sends the spool is
/// still writing, and the spooled messages handed to a connection and not yet taken by its
/// socket. Confined to the link's event loop.
final class OutboundPath {
    private var queue: OutboundQueue
    /// The durable spool (`queue.spool`), when set: queued sends are stored there first.
    private let spool: Spool?
    /// The id of the last message given to the spool.
    private var lastSpoolID: UInt64 = 0
    /// Sends the spool is writing: they join the queue, in order, once it has them.
    private var spooling = CircularBuffer<PendingSpoolWrite>()
    /// Spooled messages handed to the connection and not yet taken by its socket.
    private var inFlight = CircularBuffer<(entry: OutboundQueue.Entry, connection: UpstreamConnection)>()
    /// The highest spooled id the socket took in this tick (reported to the spool once per tick).
    private var deliveredThrough: UInt64?
    private let eventLoop: any EventLoop
    private let metrics: DaemonMetrics
    private let logger: Logger

    /// A send the spool is writing, answered once it is stored.
    private struct PendingSpoolWrite {
        var id: UInt64
        var message: OutboundMessage
        var promise: EventLoopPromise<SendOutcome>
    }

    init(configuration: Configuration, spool: (Spool, Spool.Restored)?, eventLoop: any EventLoop, metrics: DaemonMetrics, logger: Logger) {
        self.queue = OutboundQueue(maxMessages: configuration.queue.maxMessages, maxBytes: configuration.queue.maxBytes)
        self.spool = spool?.0
        self.eventLoop = eventLoop
        self.metrics = metrics
        self.logger = logger
        if let restored = spool?.1 {
            // What the last run left queued goes first, even if the bounds have shrunk since.
            let entries = restored.entries.map { e in
                OutboundQueue.Entry(message: OutboundMessage(kind: e.kind, data: e.data), spoolID: e.id)
            }
            self.queue.restore(entries, atFront: false)
            self.lastSpoolID = restored.lastID
        }
    }

    var count: Int { self.queue.count }

    func update(configuration: Configuration) {
        self.queue.setBounds(maxMessages: configuration.queue.maxMessages, maxBytes: configuration.queue.maxBytes)
        self.spool?.setFsync(configuration.queue.fsync)
    }

    /// The queue's part of `status`. Sends the spool is still writing count: they are queued
    /// once it has them.
    func status(fsync: Configuration.FsyncPolicy) -> StatusReport.Queue {
        StatusReport.Queue(
            messages: self.queue.count + self.queue.reserved,
            bytes: self.queue.bytes + self.queue.reservedBytes,
            maxMessages: self.queue.maxMessages,
            maxBytes: self.queue.maxBytes,
            spool: self.spool.map { spool in
                let (bytes, fsyncs) = spool.fileStatistics
                return .init(directory: spool.directory, fsync: fsync.rawValue, fileBytes: bytes, fsyncs: fsyncs)
            }
        )
    }

    /// Writes `message` now when nothing waits and the link takes it; else queues it, through
    /// the spool when there is one.
    func send(_ message: OutboundMessage, on link: UpstreamLink) -> SendOutcome {
        if self.queue.isIdle, link.sendNow(message) {
            return .sent
        }
        // Without a spool the message joins the queue now; with one, its place is reserved
        // until the spool stored it.
        do {
            if self.spool == nil {
                try self.queue.append(message)
            } else {
                try self.queue.reserve(message.data.readableBytes)
            }
        } catch {
            self.metrics.dropped(1, .outboundQueueFull)
            return .rejected(error.description)
        }
        guard let spool = self.spool else { return .queued(depth: self.queue.count) }
        self.lastSpoolID += 1
        let promise = self.eventLoop.makePromise(of: SendOutcome.self)
        self.spooling.append(PendingSpoolWrite(id: self.lastSpoolID, message: message, promise: promise))
        spool.append(Spool.Entry(id: self.lastSpoolID, kind: message.kind, data: message.data))
        return .spooling(promise.futureResult)
    }

    /// The spool stored (or refused) the sends up to `stored.through`: they join the queue in
    /// the order they were sent and are answered. True when some joined (the link flushes).
    func stored(_ stored: Spool.Stored) -> Bool {
        var committed = false
        while let first = self.spooling.first, first.id <= stored.through {
            self.spooling.removeFirst()
            if let failure = stored.failure {
                self.queue.release(first.message.data.readableBytes)
                first.promise.succeed(.rejected(failure.description))
            } else {
                self.queue.commit(first.message, spoolID: first.id)
                committed = true
                first.promise.succeed(.queued(depth: self.queue.count))
            }
        }
        return committed
    }

    /// Writes what waited, in order and unflushed, while the link takes it; returns how many.
    func flush(to link: UpstreamLink) -> Int {
        var count = 0
        while let entry = self.queue.first {
            if entry.spoolID == 0 {
                guard link.sendNow(entry.message, flush: false) else { break }
            } else {
                // Watched until the socket took it: then it leaves the spool. If the connection
                // dies first, it goes back to the front of the queue.
                let promise = self.eventLoop.makePromise(of: Void.self)
                guard link.sendNow(entry.message, flush: false, promise: promise) else {
                    promise.succeed(())  // unused
                    break
                }
                self.watch(entry, promise.futureResult, on: link.connection)
            }
            _ = self.queue.removeFirst()
            count += 1
        }
        return count
    }

    private func watch(_ entry: OutboundQueue.Entry, _ written: EventLoopFuture<Void>, on connection: UpstreamConnection) {
        self.inFlight.append((entry, connection))
        written.assumeIsolated().whenComplete { result in
            switch result {
            case .success:
                guard let first = self.inFlight.first, first.entry.spoolID == entry.spoolID else { return }
                self.inFlight.removeFirst()
                self.noteDelivered(entry.spoolID)
            case .failure:
                // Writes complete in order: this one and every later one of its connection
                // were not written. They go first on the next connection, in order.
                var back: [OutboundQueue.Entry] = []
                while let first = self.inFlight.first, first.connection === connection {
                    back.append(first.entry)
                    self.inFlight.removeFirst()
                }
                if !back.isEmpty {
                    self.queue.restore(back, atFront: true)
                    self.logger.info("\(back.count) spooled message(s) were not written before the connection ended: queued again")
                }
            }
        }
    }

    /// Tells the spool, once per event-loop tick, how far the upstream has taken its messages.
    private func noteDelivered(_ id: UInt64) {
        let first = self.deliveredThrough == nil
        self.deliveredThrough = max(self.deliveredThrough ?? 0, id)
        guard first else { return }
        self.eventLoop.assumeIsolated().execute {
            if let through = self.deliveredThrough { self.spool?.delivered(through: through) }
            self.deliveredThrough = nil
        }
    }
}

@available(*, unavailable)
extension OutboundPath: Sendable {}
