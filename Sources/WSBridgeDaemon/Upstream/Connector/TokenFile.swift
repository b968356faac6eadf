import WSBridgeCore

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

    /// `credentialsDirectory`: systemd's `CREDENTIALS_DIRECTORY`, for a path that names it.
    static func read(path configured: String, credentialsDirectory: String?) -> Result<String, ReadError> {
        var path = configured
        let credentials = "${CREDENTIALS_DIRECTORY}/"
        if path.hasPrefix(credentials) {
            // systemd's LoadCredential= puts the token there.
            guard let dir = credentialsDirectory else {
                return .failure(
                    ReadError(
                        path: configured,
                        problem: "CREDENTIALS_DIRECTORY is not set: run under systemd with LoadCredential=, or give an absolute path"
                    )
                )
            }
            path = dir + "/" + path.dropFirst(credentials.count)
        }
        let bytes: [UInt8]
        switch SmallFile.read(path: path, limit: 64 * 1024) {
        case .success(let b): bytes = b
        case .failure(let problem): return .failure(ReadError(path: path, problem: problem.description))
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            return .failure(ReadError(path: path, problem: "not valid UTF-8"))
        }
        let token = text.trimming { $0.isWhitespace }
        guard !token.isEmpty else {
            // Under the units, a missing /etc/wsbridge/token (or NAME.token) arrives empty.
            let source =
                configured.hasPrefix(credentials)
                ? " (the unit's LoadCredential= file, /etc/wsbridge/token or /etc/wsbridge/NAME.token for wsbridged@NAME, is missing or empty: write the token there, mode 0600)"
                : ""
            return .failure(ReadError(path: path, problem: "the file is empty\(source)"))
        }
        guard !token.contains(where: { $0 == "\r" || $0 == "\n" }) else {
            return .failure(ReadError(path: path, problem: "the token spans several lines"))
        }
        return .success(token)
    }
}
