import Logging
import NIOCore
import WSBridgeCore

/// The writer thread's batch: what the ledger says to write, written through the file, then
/// the fdatasync the policy asks for.
extension Spool {
    /// One batch: appends (and at most one delivered record) in one write, then the fsync the
    /// policy asks for. Returns the file size, fdatasyncs done, whether a batch fdatasync is
    /// due, and what to report of the appends.
    func process(_ ops: [Op], policy: Configuration.FsyncPolicy, _ w: inout Writer) -> (Int, UInt64, Bool, Stored?) {
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
        guard w.file.isOpen else {
            for p in closes { p.succeed(()) }
            let closed = Failure(description: "the spool is closed (wsbridged is stopping)")
            return (w.ledger.fileSize, 0, false, through.map { Stored(through: $0, failure: closed) })
        }
        var refused: Failure?
        // Delivered messages leave the live list; their record is written only if some stay.
        w.ledger.delivered(through: deliveredThrough)
        switch w.ledger.step(appending: !appends.isEmpty) {
        case .none:
            break
        case .cutToHeader:
            if let problem = w.file.truncate(to: SpoolFormat.headerSize) {
                self.logger.error("spool: \(problem)")
            } else {
                w.ledger.cut(to: SpoolFormat.headerSize)
                w.dirty = true
                self.logger.debug("spool: everything queued went upstream; \(self.path) is cut back to its header")
            }
        case .append(let marker):
            var batch = ByteBuffer()
            if let marker { SpoolFormat.write(kind: .delivered, id: marker, payload: nil, into: &batch) }
            for e in appends {
                SpoolFormat.write(kind: .init(e.kind), id: e.id, payload: e.data, into: &batch)
            }
            let before = w.ledger.fileSize
            var failure = w.file.write(batch, at: before)
            if failure == nil {
                if policy == .always {
                    failure = w.file.sync()
                    if failure == nil {
                        fsyncs += 1
                        w.dirty = false
                    }
                } else {
                    w.dirty = true
                }
            }
            if let failure {
                // Undo the batch, so the file never holds what was refused.
                _ = w.file.truncate(to: before)
                self.logger.error("spool: \(failure); \(appends.count) send(s) refused")
                refused = Failure(
                    description: "the message could not be stored in the spool (\(failure)); it was not queued: free space in \(self.directory), then retry"
                )
            } else {
                w.ledger.wrote(appends, bytes: batch.readableBytes)
            }
            if w.ledger.shouldCompact {
                do {
                    let exact = w.ledger.compacted()
                    try w.file.replace(with: exact)
                    w.ledger.cut(to: exact.readableBytes)
                    w.dirty = false
                    fsyncs += 2
                } catch {
                    self.logger.error("spool: compaction failed, the file keeps its delivered records for now: \(error)")
                }
            }
        }
        if w.dirty && (syncAsked || !closes.isEmpty || policy == .always) {
            if let problem = w.file.sync() {
                self.logger.error("spool: \(problem)")
            } else {
                fsyncs += 1
                w.dirty = false
            }
        }
        if !closes.isEmpty {
            w.file.close()
            for p in closes { p.succeed(()) }
        }
        return (w.ledger.fileSize, fsyncs, w.dirty && closes.isEmpty, through.map { Stored(through: $0, failure: refused) })
    }
}
