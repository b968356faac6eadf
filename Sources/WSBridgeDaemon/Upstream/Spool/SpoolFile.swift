import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// The spool's files and the raw POSIX I/O on them: `DIR/lock` (flock, so a second daemon
/// keeps off), `DIR/outbound.log`, and writes, fdatasync, truncation and the atomic rewrite.
/// Every error says what failed and how to fix it. Used by `Spool.open` and then by the
/// writer thread alone.
struct SpoolFile {
    private(set) var directory: LogDirectory
    let path: String
    private var fd: CInt

    var isOpen: Bool { self.fd >= 0 }

    /// Creates the directory if needed, takes its lock and opens the log. Blocks.
    static func open(directory: String) throws(Spool.Failure) -> SpoolFile {
        var lock = try LogDirectory.lock(directory, .spool)
        let path = directory + "/outbound.log"
        // A compaction cut short leaves its temporary file; the log itself is still whole.
        unlink(path + ".tmp")
        let fd = Glibc.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            let e = errno
            lock.unlock()
            throw .file(.open, path: path, .spool, SystemError(code: e))
        }
        return SpoolFile(directory: lock, path: path, fd: fd)
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
                throw .file(.read, path: self.path, .spool, SystemError(code: errno))
            }
            if n == 0 { return file }
            file.writeBytes(chunk[0..<n])
            offset += off_t(n)
        }
    }

    /// Writes `bytes` at `offset`.
    func write(_ bytes: ByteBuffer, at offset: Int) throws(Spool.Failure) {
        do { try DurableFile.writeAll(self.fd, bytes, at: offset) } catch { throw .file(.write, path: self.path, .spool, error) }
    }

    /// fdatasync(2).
    func sync() throws(Spool.Failure) {
        do { try DurableFile.sync(self.fd) } catch { throw .file(.sync, path: self.path, .spool, error) }
    }

    /// Cuts the log to `size`.
    func truncate(to size: Int) throws(Spool.Failure) {
        do { try DurableFile.truncate(self.fd, to: size) } catch { throw .file(.truncate, path: self.path, .spool, error) }
    }

    /// Replaces the log with `bytes` (a temporary file, fdatasync'd, renamed over it).
    mutating func replace(with bytes: ByteBuffer) throws(Spool.Failure) {
        let fd = try DurableFile.replace(self.path, in: .spool, with: bytes)
        Glibc.close(self.fd)
        self.fd = fd
    }

    /// Closes the log and lets go of the lock.
    mutating func close() {
        guard self.fd >= 0 else { return }
        Glibc.close(self.fd)
        self.directory.unlock()
        self.fd = -1
    }
}
