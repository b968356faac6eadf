import WSBridgeProtocol

/// The daemon's command-line flags that stand for settings, checked by the same rules as the
/// file (`wsbridged --url ... -H 'Authorization: Bearer x' --ca-file ...` needs no file).
public enum CommandLineSettings {
    /// `--header "Name: value"`.
    public static func header(_ text: String) throws(ConfigurationError) -> Configuration.Upstream.Header {
        guard let colon = text.firstIndex(of: ":") else {
            throw ConfigurationError(
                file: "--header", key: "upstream.headers", value: nil, problem: "write it as \"Name: value\", such as -H 'Authorization: Bearer TOKEN'")
        }
        let name = text[..<colon].trimmingSpaces()
        let value = text[text.index(after: colon)...].trimmingSpaces()
        if let problem = ConfigurationReader.headerProblem(name: name, value: value) {
            throw ConfigurationError(file: "--header", key: "upstream.headers.\(name)", value: problem.nameIsBad ? name : nil, problem: problem.text)
        }
        return .init(name: name, value: value)
    }

    /// `--subprotocol NAME`.
    public static func subprotocol(_ text: String) throws(ConfigurationError) -> String {
        guard ConfigurationReader.isToken(text) else {
            throw ConfigurationError(
                file: "--subprotocol", key: "upstream.subprotocols", value: text,
                problem: "a subprotocol must be an HTTP token (letters, digits, !#$%&'*+-.^_`|~)")
        }
        return text
    }

    /// `--proxy URL`.
    public static func proxy(_ text: String) throws(ConfigurationError) -> ProxyURL {
        guard let url = ProxyURL(parsing: text) else {
            throw ConfigurationError(
                file: "--proxy", key: "proxy.url", value: UpstreamURL.redacted(text), problem: "use http://HOST:PORT (HTTP CONNECT) or socks5://HOST:PORT")
        }
        return url
    }

    /// `--token-file`, `--ca-file`: a path, absolute or relative to the working directory.
    public static func path(_ text: String, flag: String, key: String) throws(ConfigurationError) -> String {
        guard !text.isEmpty, !text.contains("\0") else {
            throw ConfigurationError(file: flag, key: key, value: text, problem: "must be a path")
        }
        return FilePath.absolute(text, in: ".")
    }
}
