import Logging
import NIOCore
import WSBridgeCore

/// Opening a spool: the lock, the log read back, damaged and torn records reported, and the
/// file made exact (only the live records) before anything new is appended.
extension Spool {
    /// Opens (creating it if needed) and reads the spool in `directory`. Blocks: call off the
    /// event loop. Skipped records and a torn tail are logged, and the file is rewritten
    /// without them before anything new is appended.
    static func open(
        directory: String, fsync: Configuration.FsyncPolicy, eventLoop: any EventLoop, logger: Logger
    ) throws(Failure) -> (Spool, Restored) {
        var file = try SpoolFile.open(directory: directory)
        let path = file.path
        let contents: SpoolFormat.Contents
        let fileSize: Int
        do {
            let bytes = try file.readAll()
            fileSize = bytes.readableBytes
            contents = try SpoolFormat.read(bytes)
        } catch let problem as SpoolFormat.HeaderProblem {
            file.close()
            throw .unknownHeader(path: path, problem: "\(problem)")
        } catch let failure as Failure {
            file.close()
            throw failure
        } catch {
            file.close()
            throw .unknownHeader(path: path, problem: "\(error)")
        }
        for skipped in contents.skipped {
            logger.error("spool: \(path): skipped a damaged record at offset \(skipped.offset): \(skipped.problem); one queued message is lost")
        }
        if let cut = contents.truncatedAt {
            logger.error(
                "spool: \(path): truncated at offset \(cut.offset), dropping \(contents.discardedBytes) byte(s): \(cut.problem); every record before it is kept"
            )
        }
        var ledger = SpoolLedger(restoring: contents, fileSize: fileSize)
        // Start from a clean file: only the live records, in order (drops delivered, damaged
        // and torn ones), unless it is exactly that already.
        if !ledger.fileIsExact || !contents.skipped.isEmpty {
            do {
                let exact = ledger.compacted()
                try file.replace(with: exact)
                ledger.cut(to: exact.readableBytes)
            } catch {
                // No room for a second copy (a full disk): keep the file, cut off its torn tail
                // in place (which needs no space), and append after it. Delivered and skipped
                // records stay and are passed over again at the next start.
                let keep = contents.truncatedAt?.offset ?? fileSize
                guard fileSize >= SpoolFormat.headerSize, (try? file.truncate(to: keep)) != nil else {
                    file.close()
                    throw error
                }
                logger.warning("spool: could not rewrite \(path) (\(error)); kept it as it is, cut at offset \(keep)")
                ledger.keptAsIs(size: keep, deliveredThrough: contents.deliveredThrough)
            }
        }
        let entries = ledger.entries
        let liveBytes = ledger.liveBytes
        let spool = Spool(eventLoop: eventLoop, writer: SpoolWriter(file: file, ledger: ledger, fsync: fsync, eventLoop: eventLoop, logger: logger))
        if !entries.isEmpty {
            logger.notice(
                "spool: \(entries.count) queued message(s) (\(liveBytes) bytes) restored from \(path); they go upstream first, in order",
                metadata: ["spool.messages": "\(entries.count)"]
            )
        }
        return (spool, Restored(entries: entries, lastID: max(contents.lastID, contents.deliveredThrough)))
    }
}
