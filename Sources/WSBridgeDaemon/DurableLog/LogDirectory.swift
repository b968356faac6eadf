#if canImport(Glibc)
    import Glibc
#endif

/// What went wrong with a durable log's files, and how to fix it.
struct LogFailure: Error, CustomStringConvertible {
    var description: String
}

/// A durable log's directory: created if needed and locked (`DIR/lock`, flock), so a second
/// daemon keeps off it. The spool and the journal each lock their own; the sticky store lives
/// in the spool's.
struct LogDirectory {
    let path: String
    /// The setting that names it (`queue.spool`, `journal.dir`), for error texts.
    let setting: String
    private var lockFD: CInt

    /// Creates `path` if needed and takes its lock. `name` says what it is ("spool", "journal").
    static func lock(_ path: String, name: String, setting: String) throws(LogFailure) -> LogDirectory {
        if mkdir(path, 0o700) != 0 && errno != EEXIST {
            throw LogFailure(
                description:
                    "cannot create the \(name) directory \(path) (\(setting)): \(DurableFile.describe(errno)); create it writable for the daemon's user (the units' StateDirectory=wsbridged makes /var/lib/wsbridged so)"
            )
        }
        let fd = open(path + "/lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw LogFailure(
                description:
                    "cannot open \(path)/lock (\(setting)): \(DurableFile.describe(errno)); the \(name) directory must be readable and writable for the daemon's user"
            )
        }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let e = errno
            close(fd)
            if e == EWOULDBLOCK {
                throw LogFailure(
                    description:
                        "the \(name) \(path) (\(setting)) is in use by another wsbridged: give each instance its own \(setting) (for example /var/lib/wsbridged/NAME/\(name))"
                )
            }
            throw LogFailure(
                description:
                    "cannot lock \(path)/lock (\(setting)): \(DurableFile.describe(e)); put \(setting) on a local file system that supports flock (not NFS)")
        }
        return LogDirectory(path: path, setting: setting, lockFD: fd)
    }

    /// Lets go of the lock.
    mutating func unlock() {
        guard self.lockFD >= 0 else { return }
        close(self.lockFD)
        self.lockFD = -1
    }

    /// fsyncs the directory at `path` (a created, removed or renamed file is durable once it is).
    static func sync(_ path: String) {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        fsync(fd)
        close(fd)
    }
}
