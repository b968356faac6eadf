#if canImport(Glibc)
    import Glibc
#endif

/// A durable log's directory: created if needed and locked (`DIR/lock`, flock), so a second
/// daemon keeps off it. The spool and the journal each lock their own; the sticky store lives
/// in the spool's.
struct LogDirectory {
    let path: String
    /// Which log it holds, for error texts.
    let kind: DurableLogKind
    private var lockFD: CInt

    /// Creates `path` if needed and takes its lock.
    static func lock(_ path: String, _ kind: DurableLogKind) throws(LogFailure) -> LogDirectory {
        if mkdir(path, 0o700) != 0 && errno != EEXIST {
            throw .file(.createDirectory, path: path, kind, SystemError(code: errno))
        }
        let fd = open(path + "/lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .file(.openLock, path: path + "/lock", kind, SystemError(code: errno)) }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let e = errno
            close(fd)
            if e == EWOULDBLOCK { throw .inUse(directory: path, kind) }
            throw .file(.lock, path: path + "/lock", kind, SystemError(code: e))
        }
        return LogDirectory(path: path, kind: kind, lockFD: fd)
    }

    /// Lets go of the lock: unlocked first, then closed. A process forked meanwhile (a child
    /// between its fork and its exec: O_CLOEXEC closes the descriptor only at the exec) shares
    /// the lock's open file description, and a close alone would leave the lock held by it until
    /// its exec; the next open of the log then found it "in use by another wsbridged" (a test
    /// that reopened its spool while others spawned processes, under load).
    mutating func unlock() {
        guard self.lockFD >= 0 else { return }
        flock(self.lockFD, LOCK_UN)
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
