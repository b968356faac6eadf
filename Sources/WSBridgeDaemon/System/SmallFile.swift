#if canImport(Glibc)
    import Glibc
#endif

/// Reads small files (configuration, tokens) without Foundation.
package enum SmallFile {
    package struct Problem: Error, CustomStringConvertible {
        package var description: String
    }

    package static func read(path: String, limit: Int) -> Result<[UInt8], Problem> {
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
