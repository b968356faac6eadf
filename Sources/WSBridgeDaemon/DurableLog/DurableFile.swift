import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// Replacing a file so that a crash leaves the old content or the new, never a mix: write a
/// temporary file beside it, fdatasync it, rename it over the old one, fsync the directory (the
/// rename is durable only once the directory is). The spool's compaction and the daemon-scope
/// sticky keys both keep their files this way. Blocking: call off the event loop.
enum DurableFile {
    typealias Failure = LogFailure

    /// Replaces `path` (a file of the `kind` log's directory) with `bytes`. Returns the new
    /// file's descriptor, open for reading and writing (the caller closes it).
    static func replace(_ path: String, in kind: DurableLogKind, with bytes: ByteBuffer) throws(Failure) -> CInt {
        let tmp = path + ".tmp"
        let fd = Glibc.open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .file(.create, path: tmp, kind, SystemError(code: errno)) }
        do {
            try Self.writeAll(fd, bytes, at: 0)
        } catch {
            Glibc.close(fd)
            unlink(tmp)
            throw .file(.write, path: tmp, kind, error)
        }
        guard fdatasync(fd) == 0, rename(tmp, path) == 0 else {
            let e = errno
            Glibc.close(fd)
            unlink(tmp)
            throw .file(.replace, path: path, kind, SystemError(code: e))
        }
        let directory = String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)])
        LogDirectory.sync(directory.isEmpty ? "/" : directory)
        return fd
    }

    /// Writes all of `buffer` at `offset`.
    static func writeAll(_ fd: CInt, _ buffer: ByteBuffer, at offset: Int) throws(SystemError) {
        if let failed = Self.write(fd, buffer, at: offset).failure { throw failed }
    }

    /// Writes `buffer` at `offset` until all of it is written or a write fails; `written` is
    /// how much of it reached the file (a full disk takes what fits, then says ENOSPC).
    static func write(_ fd: CInt, _ buffer: ByteBuffer, at offset: Int) -> (written: Int, failure: SystemError?) {
        buffer.withUnsafeReadableBytes { raw -> (Int, SystemError?) in
            var done = 0
            while done < raw.count {
                guard let base = raw.baseAddress else { break }
                let n = pwrite(fd, base + done, raw.count - done, off_t(offset + done))
                if n < 0 {
                    if errno == EINTR { continue }
                    return (done, SystemError(code: errno))
                }
                done += n
            }
            return (done, nil)
        }
    }

    /// fdatasync(2).
    static func sync(_ fd: CInt) throws(SystemError) {
        guard fdatasync(fd) == 0 else { throw SystemError(code: errno) }
    }

    /// ftruncate(2).
    static func truncate(_ fd: CInt, to size: Int) throws(SystemError) {
        guard ftruncate(fd, off_t(size)) == 0 else { throw SystemError(code: errno) }
    }

    static func describe(_ code: CInt) -> String {
        String(cString: strerror(code))
    }
}
