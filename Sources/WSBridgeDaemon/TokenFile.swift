#if canImport(Glibc)
import Glibc
#endif

/// Reads the bearer token file at each connect. The token itself never appears in errors or logs.
enum TokenFile {
    struct ReadError: Error, CustomStringConvertible {
        var path: String
        var problem: String
        var description: String {
            "cannot read auth.token_file \(self.path): \(self.problem); fix the path or its permissions"
        }
    }

    static func read(path: String) -> Result<String, ReadError> {
        guard let file = fopen(path, "re") else {
            return .failure(ReadError(path: path, problem: String(cString: strerror(errno))))
        }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = fread(&chunk, 1, chunk.count, file)
            if n > 0 { bytes.append(contentsOf: chunk[0..<n]) }
            if n < chunk.count { break }
            if bytes.count > 64 * 1024 {
                return .failure(ReadError(path: path, problem: "larger than 64 KiB, not a token"))
            }
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            return .failure(ReadError(path: path, problem: "not valid UTF-8"))
        }
        let token = text.trimmingCharacters(in: { $0.isWhitespace || $0.isNewline })
        guard !token.isEmpty else { return .failure(ReadError(path: path, problem: "the file is empty")) }
        guard !token.contains(where: { $0 == "\r" || $0 == "\n" }) else {
            return .failure(ReadError(path: path, problem: "the token spans several lines"))
        }
        return .success(token)
    }
}

extension String {
    func trimmingCharacters(in predicate: (Character) -> Bool) -> String {
        var s = Substring(self)
        while let f = s.first, predicate(f) { s.removeFirst() }
        while let l = s.last, predicate(l) { s.removeLast() }
        return String(s)
    }
}

/// Wall-clock time for message timestamps (not for timers: those use the monotonic clock).
enum WallClock {
    static func millisecondsSinceEpoch() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }
}
