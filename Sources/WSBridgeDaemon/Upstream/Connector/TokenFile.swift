import WSBridgeCore

#if canImport(Glibc)
    import Glibc
#endif

/// Reads the bearer token file at each connect. The token itself never appears in errors or logs.
enum TokenFile {
    /// Why the token could not be read: each with what to do.
    enum ReadError: Error, Equatable, CustomStringConvertible {
        /// The path names `${CREDENTIALS_DIRECTORY}` and the daemon runs without one.
        case noCredentialsDirectory(configured: String)
        case unreadable(path: String, SmallFile.Problem)
        case notUTF8(path: String)
        /// `fromCredential`: the path is the unit's LoadCredential= file.
        case empty(path: String, fromCredential: Bool)
        case severalLines(path: String)

        var description: String { self.describe(key: "auth.token_file") }

        /// The error, naming the setting that gave the path (`auth.token_file`,
        /// `local.websocket.token_file`).
        func describe(key: String) -> String {
            let (path, problem): (String, String)
            switch self {
            case .noCredentialsDirectory(let configured):
                (path, problem) = (configured, "CREDENTIALS_DIRECTORY is not set: run under systemd with LoadCredential=, or give an absolute path")
            case .unreadable(let p, let why): (path, problem) = (p, why.description)
            case .notUTF8(let p): (path, problem) = (p, "not valid UTF-8")
            case .empty(let p, let fromCredential):
                // Under the units, a missing /etc/wsbridge/token (or NAME.token) arrives empty.
                let source =
                    fromCredential
                    ? " (the unit's LoadCredential= file, /etc/wsbridge/token or /etc/wsbridge/NAME.token for wsbridged@NAME, is missing or empty: write the token there, mode 0600)"
                    : ""
                (path, problem) = (p, "the file is empty\(source)")
            case .severalLines(let p): (path, problem) = (p, "the token spans several lines")
            }
            return "cannot read \(key) \(path): \(problem); fix the path or its permissions"
        }
    }

    /// `credentialsDirectory`: systemd's `CREDENTIALS_DIRECTORY`, for a path that names it.
    static func read(path configured: String, credentialsDirectory: String?) -> Result<String, ReadError> {
        var path = configured
        let credentials = "${CREDENTIALS_DIRECTORY}/"
        if path.hasPrefix(credentials) {
            // systemd's LoadCredential= puts the token there.
            guard let dir = credentialsDirectory else { return .failure(.noCredentialsDirectory(configured: configured)) }
            path = dir + "/" + path.dropFirst(credentials.count)
        }
        let bytes: [UInt8]
        switch SmallFile.read(path: path, limit: 64 * 1024) {
        case .success(let b): bytes = b
        case .failure(let problem): return .failure(.unreadable(path: path, problem))
        }
        guard let text = String(validating: bytes, as: UTF8.self) else { return .failure(.notUTF8(path: path)) }
        let token = text.trimming { $0.isWhitespace }
        guard !token.isEmpty else { return .failure(.empty(path: path, fromCredential: configured.hasPrefix(credentials))) }
        guard !token.contains(where: { $0 == "\r" || $0 == "\n" }) else { return .failure(.severalLines(path: path)) }
        return .success(token)
    }
}
