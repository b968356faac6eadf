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

    /// Replaces `path` with `bytes`. Returns the new file's descriptor, open for reading and
    /// writing (the caller closes it).
    static func replace(_ path: String, with bytes: ByteBuffer) throws(Failure) -> CInt {
        let tmp = path + ".tmp"
        let fd = Glibc.open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Failure(description: "cannot create \(tmp): \(Self.describe(errno))") }
        if let problem = Self.writeAll(fd, bytes, at: 0) {
            Glibc.close(fd)
            unlink(tmp)
            throw Failure(description: "cannot write \(tmp): \(problem)")
        }
        guard fdatasync(fd) == 0, rename(tmp, path) == 0 else {
            let e = errno
            Glibc.close(fd)
            unlink(tmp)
            throw Failure(description: "cannot replace \(path): \(Self.describe(e))")
        }
        let directory = String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)])
        LogDirectory.sync(directory.isEmpty ? "/" : directory)
        return fd
    }

    /// Writes all of `buffer` at `offset`; nil once every byte is written, else what failed.
    static func writeAll(_ fd: CInt, _ buffer: ByteBuffer, at offset: Int) -> String? {
        buffer.withUnsafeReadableBytes { raw -> String? in
            var done = 0
            while done < raw.count {
                guard let base = raw.baseAddress else { return nil }
                let n = pwrite(fd, base + done, raw.count - done, off_t(offset + done))
                if n < 0 {
                    if errno == EINTR { continue }
                    return Self.describe(errno)
                }
                done += n
            }
            return nil
        }
    }

    static func describe(_ code: CInt) -> String {
        String(cString: strerror(code))
    }
}
