#if canImport(Glibc)
    import Glibc
#endif

/// Paths the configuration names, made absolute once at load: the daemon's working directory is
/// `/` under systemd, so a relative path must not depend on it.
package enum FilePath {
    /// `path` if absolute, else `path` under `folder` (itself made absolute against the working
    /// directory), with `.` components and a leading `./` dropped.
    package static func absolute(_ path: String, in folder: String) -> String {
        if path.hasPrefix("/") { return path }
        var base = folder
        if !base.hasPrefix("/") {
            let cwd = Self.workingDirectory()
            base = base == "." ? cwd : cwd + "/" + base
        }
        var parts = base.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        for part in path.split(separator: "/", omittingEmptySubsequences: true) where part != "." {
            parts.append(String(part))
        }
        return "/" + parts.filter { $0 != "." }.joined(separator: "/")
    }

    static func workingDirectory() -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        guard getcwd(&buffer, buffer.count) != nil else { return "/" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
