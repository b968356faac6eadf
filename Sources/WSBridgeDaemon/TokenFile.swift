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

    static func read(path configured: String) -> Result<String, ReadError> {
        var path = configured
        let credentials = "${CREDENTIALS_DIRECTORY}/"
        if path.hasPrefix(credentials) {
            // systemd's LoadCredential= puts the token there.
            guard let dir = getenv("CREDENTIALS_DIRECTORY") else {
                return .failure(
                    ReadError(
                        path: configured,
                        problem: "CREDENTIALS_DIRECTORY is not set: run under systemd with LoadCredential=, or give an absolute path"
                    )
                )
            }
            path = String(cString: dir) + "/" + path.dropFirst(credentials.count)
        }
        let bytes: [UInt8]
        switch SmallFile.read(path: path, limit: 64 * 1024) {
        case .success(let b): bytes = b
        case .failure(let problem): return .failure(ReadError(path: path, problem: problem.description))
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

/// Reads small files (configuration, tokens) without Foundation.
public enum SmallFile {
    public struct Problem: Error, CustomStringConvertible {
        public var description: String
    }

    public static func read(path: String, limit: Int) -> Result<[UInt8], Problem> {
        guard let file = fopen(path, "re") else {
            return .failure(Problem(description: String(cString: strerror(errno))))
        }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16384)
        while true {
            let n = fread(&chunk, 1, chunk.count, file)
            if n > 0 { bytes.append(contentsOf: chunk[0..<n]) }
            if bytes.count > limit {
                return .failure(Problem(description: "larger than \(limit) bytes"))
            }
            if n < chunk.count { break }
        }
        return .success(bytes)
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
