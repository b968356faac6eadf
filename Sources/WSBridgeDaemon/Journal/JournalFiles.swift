import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// The journal's segment files and the raw POSIX I/O on them (its directory and lock are a
/// `LogDirectory`), appends, fdatasync, truncation and removal. Every error
/// says what failed and how to fix it. Blocking: used by `Journal.open`, then by the writer
/// and reader threads.
enum JournalFiles {
    typealias Failure = Journal.Failure

    /// Opens segment `firstSeq` (O_CLOEXEC added).
    static func openSegment(_ directory: String, firstSeq: UInt64, flags: CInt) throws(Failure) -> CInt {
        let path = Self.path(directory, firstSeq: firstSeq)
        let fd = Glibc.open(path, flags | O_CLOEXEC)
        guard fd >= 0 else { throw .file(.open, path: path, .journal, SystemError(code: errno)) }
        return fd
    }

    /// The segments' first seqs, in order (other files are left alone).
    static func list(_ directory: String) throws(Failure) -> [UInt64] {
        guard let dir = opendir(directory) else {
            throw .file(.readDirectory, path: directory, .journal, SystemError(code: errno))
        }
        defer { closedir(dir) }
        var seqs: [UInt64] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if let seq = JournalFormat.firstSeq(fileName: name) { seqs.append(seq) }
        }
        return seqs.sorted()
    }

    static func path(_ directory: String, firstSeq: UInt64) -> String {
        directory + "/" + JournalFormat.fileName(firstSeq: firstSeq)
    }

    /// Reads up to `count` bytes at `offset`; fewer at the end of the file.
    static func read(_ fd: CInt, at offset: Int, count: Int, path: String) throws(Failure) -> ByteBuffer {
        var buffer = ByteBuffer()
        var done = 0
        while done < count {
            var failure: CInt = 0
            let n = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count - done) { raw in
                let n = pread(fd, raw.baseAddress, count - done, off_t(offset + done))
                if n < 0 { failure = errno }
                return max(0, n)
            }
            if failure == EINTR { continue }
            if failure != 0 {
                throw .file(.read, path: path, .journal, SystemError(code: failure))
            }
            if n == 0 { break }
            done += n
        }
        return buffer
    }

    static func size(_ fd: CInt) -> Int {
        var st = stat()
        return fstat(fd, &st) == 0 ? Int(st.st_size) : 0
    }

    /// The file's last modification, in milliseconds since the epoch.
    static func modifiedMillis(_ path: String) -> Int64? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return Int64(st.st_mtim.tv_sec) * 1000 + Int64(st.st_mtim.tv_nsec) / 1_000_000
    }

    /// Creates a segment holding only its header, fdatasync'd, its directory fsync'd. Returns
    /// its descriptor, open for appending.
    static func create(_ directory: String, _ header: JournalFormat.Header) throws(Failure) -> CInt {
        let path = Self.path(directory, firstSeq: header.firstSeq)
        let fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw .file(.create, path: path, .journal, SystemError(code: errno))
        }
        do {
            try DurableFile.writeAll(fd, JournalFormat.header(header), at: 0)
            try DurableFile.sync(fd)
        } catch {
            close(fd)
            unlink(path)
            throw .file(.write, path: path, .journal, error)
        }
        LogDirectory.sync(directory)
        return fd
    }
}
