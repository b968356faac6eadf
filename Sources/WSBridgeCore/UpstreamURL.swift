/// A parsed `ws://` or `wss://` URL. Credentials in the URL are refused: use `auth.token_file`
/// or `headers` so they never reach logs or status output.
public struct UpstreamURL: Sendable, Equatable, CustomStringConvertible {
    public enum Scheme: String, Sendable {
        case ws, wss
    }

    public var scheme: Scheme
    public var host: String
    public var port: Int
    /// Path plus query, always starting with "/".
    public var path: String

    public init(scheme: Scheme, host: String, port: Int, path: String) {
        self.scheme = scheme
        self.host = host
        self.port = port
        self.path = path
    }

    public var isTLS: Bool { self.scheme == .wss }

    /// The value of the HTTP `Host` header.
    public var hostHeader: String {
        let defaultPort = self.scheme == .wss ? 443 : 80
        let h = self.host.contains(":") ? "[\(self.host)]" : self.host
        return self.port == defaultPort ? h : "\(h):\(self.port)"
    }

    public var description: String {
        "\(self.scheme.rawValue)://\(self.hostHeader)\(self.path)"
    }

    public enum ParseError: Error, Equatable, CustomStringConvertible {
        case scheme(String)
        /// No `scheme://` at all: the text as written.
        case missingScheme(String)
        case host
        case port(String)
        case credentials

        public var description: String {
            switch self {
            case .scheme(let s):
                "unsupported scheme '\(s)': use ws:// or wss://"
            case .missingScheme(let text):
                "no scheme in '\(text)': write ws://\(text) (or wss://\(text) for TLS)"
            case .host:
                "missing host: write it as ws://HOST[:PORT]/PATH"
            case .port(let p):
                "invalid port '\(p)': use a number from 1 to 65535"
            case .credentials:
                "credentials in the URL are not allowed: put the token in auth.token_file or a header"
            }
        }
    }

    /// `text` with any `user:password@` in front of the host replaced by `***@`, for messages.
    public static func redacted(_ text: String) -> String {
        let schemeEnd = text.firstRange(of: "://")?.upperBound ?? text.startIndex
        let authorityEnd = text[schemeEnd...].firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? text.endIndex
        guard let at = text[schemeEnd..<authorityEnd].lastIndex(of: "@") else { return text }
        return String(text[..<schemeEnd]) + "***" + String(text[at...])
    }

    public init(parsing text: String) throws(ParseError) {
        let parts = text.split(separator: "://", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { throw .missingScheme(Self.redacted(text)) }
        let schemeText = parts[0].lowercased()
        guard let scheme = Scheme(rawValue: schemeText) else { throw .scheme(schemeText) }
        var rest = parts[1]
        let pathStart = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
        let authority = rest[..<pathStart]
        rest = rest[pathStart...]
        if authority.contains("@") { throw .credentials }
        var host: Substring
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw .host }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if after.hasPrefix(":") { portText = after.dropFirst() } else if !after.isEmpty { throw .host }
        } else if let colon = authority.lastIndex(of: ":") {
            host = authority[..<colon]
            portText = authority[authority.index(after: colon)...]
        } else {
            host = authority
        }
        guard !host.isEmpty else { throw .host }
        var port = scheme == .wss ? 443 : 80
        if let portText {
            guard let p = Int(portText), (1...65535).contains(p) else { throw .port(String(portText)) }
            port = p
        }
        var path = String(rest)
        if path.isEmpty { path = "/" } else if path.hasPrefix("?") { path = "/" + path }
        if let hash = path.firstIndex(of: "#") { path = String(path[..<hash]) }
        self.init(scheme: scheme, host: String(host), port: port, path: path)
    }
}

/// A proxy: HTTP CONNECT (`http://`) or SOCKS5 (`socks5://`, `socks5h://`, `socks://`).
public struct ProxyURL: Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        case httpConnect
        case socks5
    }

    public var kind: Kind
    public var host: String
    public var port: Int
    /// From `user:password@` (percent-decoded): HTTP Basic Proxy-Authorization, or SOCKS5
    /// username/password (RFC 1929). Never part of `description`.
    public var username: String?
    public var password: String?

    public init(kind: Kind, host: String, port: Int, username: String? = nil, password: String? = nil) {
        self.kind = kind
        self.host = host
        self.port = port
        self.username = username
        self.password = password
    }

    /// The proxy's address, without credentials (for logs and messages).
    public var description: String {
        "\(self.kind == .httpConnect ? "http" : "socks5")://\(self.host):\(self.port)"
    }

    public init?(parsing text: String) {
        let lower = text.lowercased()
        let kind: Kind
        let defaultPort: Int
        var rest: Substring
        if lower.hasPrefix("http://") {
            (kind, defaultPort, rest) = (.httpConnect, 80, text.dropFirst(7))
        } else if lower.hasPrefix("socks5://") {
            (kind, defaultPort, rest) = (.socks5, 1080, text.dropFirst(9))
        } else if lower.hasPrefix("socks5h://") {
            (kind, defaultPort, rest) = (.socks5, 1080, text.dropFirst(10))
        } else if lower.hasPrefix("socks://") {
            (kind, defaultPort, rest) = (.socks5, 1080, text.dropFirst(8))
        } else {
            return nil
        }
        if let slash = rest.firstIndex(of: "/") { rest = rest[..<slash] }
        var username: String?
        var password: String?
        if let at = rest.lastIndex(of: "@") {
            let userinfo = rest[..<at]
            if let colon = userinfo.firstIndex(of: ":") {
                username = Self.percentDecoded(userinfo[..<colon])
                password = Self.percentDecoded(userinfo[userinfo.index(after: colon)...])
            } else {
                username = Self.percentDecoded(userinfo)
            }
            guard username != nil, userinfo.firstIndex(of: ":") == nil || password != nil else { return nil }
            rest = rest[rest.index(after: at)...]
        }
        guard let url = try? UpstreamURL(parsing: "ws://\(rest)/") else { return nil }
        self.init(
            kind: kind, host: url.host, port: rest.contains(":") && !rest.hasSuffix("]") ? url.port : defaultPort, username: username, password: password)
    }

    /// `%XX` decoded as UTF-8; nil when an escape is malformed or the result is not UTF-8.
    static func percentDecoded(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        var it = Array(text.utf8)[...]
        while let b = it.popFirst() {
            guard b == UInt8(ascii: "%") else {
                bytes.append(b)
                continue
            }
            guard it.count >= 2, let hi = Self.hex(it.popFirst()!), let lo = Self.hex(it.popFirst()!) else { return nil }
            bytes.append(hi << 4 | lo)
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hex(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// Chooses the proxy from the conventional environment variables for a given upstream, or nil.
    public static func fromEnvironment(_ env: [String: String], for url: UpstreamURL) -> ProxyURL? {
        func value(_ name: String) -> String? {
            if let v = env[name], !v.isEmpty { return v }
            if let v = env[name.uppercased()], !v.isEmpty { return v }
            return nil
        }
        if let noProxy = value("no_proxy"), Self.matchesNoProxy(noProxy, host: url.host) { return nil }
        let candidates = url.isTLS ? ["https_proxy", "all_proxy"] : ["http_proxy", "all_proxy"]
        for name in candidates {
            if let v = value(name) {
                return ProxyURL(parsing: v.contains("://") ? v : "http://\(v)")
            }
        }
        return nil
    }

    static func matchesNoProxy(_ list: String, host: String) -> Bool {
        let host = host.lowercased()
        for raw in list.split(separator: ",") {
            var entry = raw.trimmingSpaces().lowercased()
            if entry == "*" { return true }
            if let colon = entry.lastIndex(of: ":"), !entry.contains("]"), entry.filter({ $0 == ":" }).count == 1 {
                entry = String(entry[..<colon])
            }
            if entry.hasPrefix(".") { entry.removeFirst() }
            if entry.isEmpty { continue }
            if host == entry || host.hasSuffix("." + entry) { return true }
        }
        return false
    }
}
