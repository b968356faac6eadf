/// Which durable log a failure is in: its name in texts and the setting that places it. The
/// sticky store's file and the spool's compaction live in the spool's directory.
enum DurableLogKind: Sendable {
    case spool, journal

    var name: String {
        switch self {
        case .spool: "spool"
        case .journal: "journal"
        }
    }

    var setting: String {
        switch self {
        case .spool: "queue.spool"
        case .journal: "journal.dir"
        }
    }
}

/// What went wrong with a durable log's files, and how to fix it: every text is here.
indirect enum LogFailure: Error, CustomStringConvertible {
    /// A system call on one of the log's files, or on its directory, failed.
    case file(Step, path: String, DurableLogKind, SystemError)
    /// Another daemon holds the directory's lock.
    case inUse(directory: String, DurableLogKind)
    /// The spool's file does not begin with a header this daemon reads.
    case unknownHeader(path: String, problem: String)
    /// The daemon-scope sticky keys' file cannot be read, or does not decode.
    case stickyUnreadable(path: String, problem: String)
    case stickyDamaged(path: String, problem: String)
    /// The journal was opened without `journal.dir` (the daemon opens it only when it is set).
    case journalNotSet
    /// The spool closed while a send waited for it.
    case spoolClosed
    /// A send the spool could not store, refused (never queued).
    case notStored(LogFailure, directory: String)

    /// What the failed system call was doing.
    enum Step: Sendable {
        case createDirectory, openLock, lock, readDirectory, open, create, read, write, sync, truncate, replace
    }

    var description: String {
        switch self {
        case .file(let step, let path, let log, let error):
            let access = "the \(log.name) directory must be readable and writable for the daemon's user"
            let (verb, fix): (String, String) =
                switch step {
                case .createDirectory:
                    (
                        "create the \(log.name) directory",
                        "create it writable for the daemon's user (the units' StateDirectory=wsbridged makes /var/lib/wsbridged so)"
                    )
                case .openLock: ("open", access)
                case .lock: ("lock", "put \(log.setting) on a local file system that supports flock (not NFS)")
                case .readDirectory: ("read the \(log.name) directory", access)
                case .open: ("open", access)
                case .create: ("create", "\(access), on a disk with room")
                case .read: ("read", "check the disk (dmesg), or move the file away")
                case .write: ("write", "\(access), on a disk with room")
                case .sync: ("fdatasync", "check the disk (dmesg): what was written may not be on it")
                case .truncate: ("truncate", "check the disk (dmesg)")
                case .replace: ("replace", "\(access), on a disk with room")
                }
            return "cannot \(verb) \(path) (\(log.setting)): \(error); \(fix)"
        case .inUse(let directory, let log):
            return
                "the \(log.name) \(directory) (\(log.setting)) is in use by another wsbridged: give each instance its own \(log.setting) (for example /var/lib/wsbridged/NAME/\(log.name))"
        case .unknownHeader(let path, let problem):
            return "\(path) (queue.spool): \(problem); move it away, or point queue.spool at another directory"
        case .stickyUnreadable(let path, let problem):
            return "cannot read \(path): \(problem); make it readable for the daemon's user, or move it away to start without its keys"
        case .stickyDamaged(let path, let problem):
            return "\(path) is damaged (\(problem)): move it away to start without the daemon-scope sticky keys it held"
        case .journalNotSet:
            return "journal.dir is not set"
        case .spoolClosed:
            return "the spool is closed (wsbridged is stopping)"
        case .notStored(let failure, let directory):
            return "the message could not be stored in the spool (\(failure)); it was not queued: free space in \(directory), then retry"
        }
    }
}
