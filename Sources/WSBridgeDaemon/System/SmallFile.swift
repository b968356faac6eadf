#if canImport(Glibc)
    import Glibc
#endif

/// Reads small files (configuration, tokens) without Foundation.
package enum SmallFile {
    package enum Problem: Error, Equatable, CustomStringConvertible {
        /// fopen(3) failed with this errno.
        case cannotOpen(errno: Int32)
        /// The file holds more than the reader takes.
        case tooLarge(limit: Int)

        package var description: String {
            switch self {
            case .cannotOpen(let code): String(cString: strerror(code))
            case .tooLarge(let limit): "larger than \(limit) bytes"
            }
        }
    }

    package static func read(path: String, limit: Int) -> Result<[UInt8], Problem> {
        guard let file = fopen(path, "re") else { return .failure(.cannotOpen(errno: errno)) }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16384)
        while true {
            let n = fread(&chunk, 1, chunk.count, file)
            if n > 0 { bytes.append(contentsOf: chunk[0..<n]) }
            if bytes.count > limit {
                return .failure(.tooLarge(limit: limit))
            }
            if n < chunk.count { break }
        }
        return .success(bytes)
    }
}
