import Logging
import NIOCore
import WSBridgeCore

#if canImport(Glibc)
    import Glibc
#endif

/// The spool's policy on the durable log (`LogWriter`): each batch writes what the ledger says
/// (appends, at most one delivered record) in one write, then the fdatasync `queue.fsync` asks
/// for; it compacts when the ledger says so, and writes the sticky store's snapshots.
struct SpoolWriter: LogPolicy {
    var file: SpoolFile
    var ledger: SpoolLedger
    var fsync: Configuration.FsyncPolicy
    let eventLoop: any EventLoop
    let logger: Logger
    /// Written since the last fdatasync.
    private var dirty = false

    init(file: SpoolFile, ledger: SpoolLedger, fsync: Configuration.FsyncPolicy, eventLoop: any EventLoop, logger: Logger) {
        self.file = file
        self.ledger = ledger
        self.fsync = fsync
        self.eventLoop = eventLoop
        self.logger = logger
    }

    static var sync: Spool.Op { .sync }

    mutating func write(_ ops: [Spool.Op]) -> LogBatch<Spool.Shared> {
        var appends: [Spool.Entry] = []
        var deliveredThrough: UInt64 = 0
        var syncAsked = false
        var closes: [EventLoopPromise<Void>] = []
        var snapshots: [(String, ByteBuffer, EventLoopPromise<Void>)] = []
        for op in ops {
            switch op {
            case .append(let e): appends.append(e)
            case .delivered(let id): deliveredThrough = max(deliveredThrough, id)
            case .sync: syncAsked = true
            case .setFsync(let policy): self.fsync = policy
            case .snapshot(let path, let bytes, let promise): snapshots.append((path, bytes, promise))
            case .close(let p): closes.append(p)
            }
        }
        let through = appends.last?.id
        guard self.file.isOpen else {
            let closed = Spool.Failure.spoolClosed
            for (_, _, promise) in snapshots { promise.fail(closed) }
            for p in closes { p.succeed(()) }
            return self.batch(fsyncs: 0, syncDue: false, closed: true, stored: through.map { Spool.Stored(through: $0, failure: closed) })
        }
        var fsyncs: UInt64 = 0
        let refused = self.store(appends, deliveredThrough: deliveredThrough, &fsyncs)
        if self.dirty && (syncAsked || !closes.isEmpty || self.fsync == .always) {
            do {
                try self.file.sync()
                fsyncs += 1
                self.dirty = false
            } catch {
                self.logger.error("spool: \(error)")
            }
        }
        for (path, bytes, promise) in snapshots {
            do {
                Glibc.close(try DurableFile.replace(path, in: .spool, with: bytes))
                promise.succeed(())
            } catch {
                promise.fail(error)
            }
        }
        if !closes.isEmpty {
            self.file.close()
            for p in closes { p.succeed(()) }
        }
        return self.batch(
            fsyncs: fsyncs, syncDue: self.dirty && closes.isEmpty, closed: !closes.isEmpty,
            stored: through.map { Spool.Stored(through: $0, failure: refused) })
    }

    private func batch(fsyncs: UInt64, syncDue: Bool, closed: Bool, stored: Spool.Stored?) -> LogBatch<Spool.Shared> {
        let (size, eventLoop) = (self.ledger.fileSize, self.eventLoop)
        return LogBatch(
            apply: { s in
                s.fileBytes = size
                s.fsyncs += fsyncs
                guard let stored, let handler = s.onStored else { return nil }
                return { eventLoop.execute { handler(stored) } }
            }, syncDue: syncDue, closed: closed)
    }

    /// Writes the appends and the delivered marker the ledger asks for, and compacts when it
    /// says so. Returns why the appends were refused, if they were.
    private mutating func store(_ appends: [Spool.Entry], deliveredThrough: UInt64, _ fsyncs: inout UInt64) -> Spool.Failure? {
        // Delivered messages leave the live list; their record is written only if some stay.
        self.ledger.delivered(through: deliveredThrough)
        switch self.ledger.step(appending: !appends.isEmpty) {
        case .none:
            return nil
        case .cutToHeader:
            do {
                try self.file.truncate(to: SpoolFormat.headerSize)
                self.ledger.cut(to: SpoolFormat.headerSize)
                self.dirty = true
                self.logger.debug("spool: everything queued went upstream; \(self.file.path) is cut back to its header")
            } catch {
                self.logger.error("spool: \(error)")
            }
            return nil
        case .append(let marker):
            var refused: Spool.Failure?
            var batch = ByteBuffer()
            if let marker { SpoolFormat.write(kind: .delivered, id: marker, payload: nil, into: &batch) }
            for e in appends {
                SpoolFormat.write(kind: .init(e.kind), id: e.id, payload: e.data, into: &batch)
            }
            let before = self.ledger.fileSize
            var failure: Spool.Failure?
            do {
                try self.file.write(batch, at: before)
                if self.fsync == .always {
                    try self.file.sync()
                    fsyncs += 1
                    self.dirty = false
                } else {
                    self.dirty = true
                }
            } catch {
                failure = error
            }
            if let failure {
                // Undo the batch, so the file never holds what was refused.
                try? self.file.truncate(to: before)
                self.logger.error("spool: \(failure); \(appends.count) send(s) refused")
                refused = .notStored(failure, directory: self.file.directory.path)
            } else {
                self.ledger.wrote(appends, bytes: batch.readableBytes)
            }
            if self.ledger.shouldCompact {
                do {
                    let exact = self.ledger.compacted()
                    try self.file.replace(with: exact)
                    self.ledger.cut(to: exact.readableBytes)
                    self.dirty = false
                    fsyncs += 2
                } catch {
                    self.logger.error("spool: compaction failed, the file keeps its delivered records for now: \(error)")
                }
            }
            return refused
        }
    }
}
