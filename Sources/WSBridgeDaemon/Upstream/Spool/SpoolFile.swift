import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// The spool's files and the raw POSIX I/O on them: `DIR/lock` (flock, so a second daemon
/// keeps off), `DIR/outbound.log`, and writes, fdatasync, truncation and the atomic rewrite.
/// Every error says what failed and how to fix it. Used by `Spool.open` and then by the
/// writer thread alone.
struct SpoolFile {
    let directory: String
    let path: String
    private var fd: CInt
    private var lockFD: CInt

    var isOpen: Bool { self.fd >= 0 }

    /// Creates the directory if needed, takes its lock and opens the log. Blocks.
    static func open(directory: String) throws(Spool.Failure) -> SpoolFile {
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            let e = errno
            throw Spool.Failure(
                description:
                    "cannot create the spool directory \(directory) (queue.spool): \(DurableFile.describe(e)); create it writable for the daemon's user (the units' StateDirectory=wsbridged makes /var/lib/wsbridged so)"
            )
        }
        let lockFD = Glibc.open(directory + "/lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard lockFD >= 0 else {
            throw Spool.Failure(
                description:
                    "cannot open \(directory)/lock (queue.spool): \(DurableFile.describe(errno)); the spool directory must be writable for the daemon's user")
        }
        guard flock(lockFD, LOCK_EX | LOCK_NB) == 0 else {
            let e = errno
            Glibc.close(lockFD)
            if e == EWOULDBLOCK {
                throw Spool.Failure(
                    description:
                        "the spool \(directory) (queue.spool) is in use by another wsbridged: give each instance its own queue.spool (for example /var/lib/wsbridged/NAME/spool)"
                )
            }
            throw Spool.Failure(description: "cannot lock \(directory)/lock (queue.spool): \(DurableFile.describe(e))")
        }
        let path = directory + "/outbound.log"
        // A compaction cut short leaves its temporary file; the log itself is still whole.
        unlink(path + ".tmp")
        let fd = Glibc.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            let e = errno
            Glibc.close(lockFD)
            throw Spool.Failure(description: "cannot open \(path) (queue.spool): \(DurableFile.describe(e))")
        }
        return SpoolFile(directory: directory, path: path, fd: fd, lockFD: lockFD)
    }

    /// The whole log. Blocks.
    func readAll() throws(Spool.Failure) -> ByteBuffer {
        var file = ByteBuffer()
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        var offset: off_t = 0
        while true {
            let n = chunk.withUnsafeMutableBytes { pread(self.fd, $0.baseAddress, $0.count, offset) }
            if n < 0 {
                if errno == EINTR { continue }
                throw Spool.Failure(description: "cannot read \(self.path) (queue.spool): \(DurableFile.describe(errno))")
            }
            if n == 0 { return file }
            file.writeBytes(chunk[0..<n])
            offset += off_t(n)
        }
    }

    /// Writes `bytes` at `offset`; nil, or what went wrong.
    func write(_ bytes: ByteBuffer, at offset: Int) -> String? {
        DurableFile.writeAll(self.fd, bytes, at: offset).map { "cannot write \(self.path): \($0)" }
    }

    /// fdatasync; nil, or what went wrong.
    func sync() -> String? {
        fdatasync(self.fd) == 0 ? nil : "cannot fdatasync \(self.path): \(DurableFile.describe(errno))"
    }

    /// Cuts the log to `size`; nil, or what went wrong.
    func truncate(to size: Int) -> String? {
        ftruncate(self.fd, off_t(size)) == 0 ? nil : "cannot truncate \(self.path): \(DurableFile.describe(errno))"
    }

    /// Replaces the log with `bytes` (a temporary file, fdatasync'd, renamed over it).
    mutating func replace(with bytes: ByteBuffer) throws(Spool.Failure) {
        let fd: CInt
        do {
            fd = try DurableFile.replace(self.path, with: bytes)
        } catch {
            throw Spool.Failure(description: error.description)
        }
        Glibc.close(self.fd)
        self.fd = fd
    }

    /// Closes the log and lets go of the lock.
    mutating func close() {
        guard self.fd >= 0 else { return }
        Glibc.close(self.fd)
        Glibc.close(self.lockFD)
        self.fd = -1
        self.lockFD = -1
    }
}
