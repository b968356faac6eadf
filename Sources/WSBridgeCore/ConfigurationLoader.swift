import TOMLKit
import WSBridgeProtocol

/// Reads `wsbridged.toml` into a validated `Configuration`.
///
/// Unknown keys are errors (a typo must not silently fall back to a default); every error names
/// the file, line, key, the bad value and what is accepted.
public struct ConfigurationLoader: Sendable {
    public var fileName: String

    public init(fileName: String) {
        self.fileName = fileName
    }

    /// Parses and validates TOML text. `environment` is consulted for nothing here; overrides
    /// from the command line are applied by the caller afterwards with `validate`.
    public func load(text: String) throws(ConfigurationError) -> Configuration {
        let table: TOMLTable
        do {
            table = try TOMLTable(string: text)
        } catch let error as TOMLParseError {
            throw ConfigurationError(
                file: self.fileName,
                line: error.source.begin.line,
                column: error.source.begin.column,
                problem: "TOML syntax error: \(error.description)"
            )
        } catch {
            throw ConfigurationError(file: self.fileName, problem: "cannot parse TOML: \(error)")
        }
        var reader = Reader(fileName: self.fileName, lines: LineIndex(text: text))
        return try reader.read(table)
    }
}

/// Finds the line of `section.key` in the source text, for error messages.
struct LineIndex: Sendable {
    private var lineOfKey: [String: Int] = [:]

    init(text: String) {
        var section = ""
        var number = 0
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            number += 1
            let line = raw.trimmingSpaces()
            if line.hasPrefix("#") || line.isEmpty { continue }
            if line.hasPrefix("[") {
                let name = line.drop(while: { $0 == "[" }).prefix(while: { $0 != "]" })
                section = name.split(separator: ".").map { $0.trimmingSpaces().trimmingQuotes() }.joined(separator: ".")
                self.lineOfKey[section] = self.lineOfKey[section] ?? number
                continue
            }
            guard let eq = line.firstIndex(of: "=") else { continue }
            let key = line[..<eq].split(separator: ".").map { $0.trimmingSpaces().trimmingQuotes() }.joined(separator: ".")
            let full = section.isEmpty ? key : "\(section).\(key)"
            self.lineOfKey[full] = self.lineOfKey[full] ?? number
        }
    }

    func line(of key: String) -> Int? {
        var k = key
        while true {
            if let l = self.lineOfKey[k] { return l }
            guard let dot = k.lastIndex(of: ".") else { return nil }
            k = String(k[..<dot])
        }
    }
}

extension String {
    func trimmingQuotes() -> String {
        if self.count >= 2, let f = self.first, f == "\"" || f == "'", self.last == f {
            return String(self.dropFirst().dropLast())
        }
        return self
    }
}

private struct Reader {
    var fileName: String
    var lines: LineIndex

    func error(_ key: String, _ value: (any TOMLValueConvertible)?, _ problem: String) -> ConfigurationError {
        ConfigurationError(
            file: self.fileName,
            line: self.lines.line(of: key),
            key: key,
            value: value.map { Self.render($0) },
            problem: problem
        )
    }

    static func render(_ value: any TOMLValueConvertible) -> String {
        switch value.type {
        case .string: return "\"\(value.string ?? "")\""
        default: return value.debugDescription
        }
    }

    static let sections: [String: Set<String>] = [
        "upstream": [
            "url", "headers", "subprotocols", "compression", "max_message_size", "connect_timeout", "connect_on_start", "fallback_urls", "failback_after",
            "on_open", "ready_when", "ready_timeout",
        ],
        "auth": ["token_file"],
        "tls": ["ca_file", "cert_file", "key_file", "server_name", "insecure"],
        "proxy": ["url", "use_environment"],
        "heartbeat": ["interval", "deadline", "text"],
        "backoff": ["base", "cap", "stable_after", "max_attempts"],
        "reachability": ["enabled", "poll_interval"],
        "local": [
            "socket", "mode", "group", "max_line", "subscriber_queue", "subscriber_queue_bytes", "replay", "replay_bytes", "inline_json",
            "max_clients", "client_output_bytes", "max_pending_requests", "max_pending_requests_total", "filter_max_bytes",
            "filter_max_depth", "sticky_keys_per_client", "sticky_keys", "sticky_bytes",
        ],
        "queue": ["max_messages", "max_bytes", "spool", "fsync"],
        "access": ["write_uids", "write_groups"],
        "log": ["level"],
        "metrics": ["listen", "max_connections"],
    ]

    mutating func read(_ root: TOMLTable) throws(ConfigurationError) -> Configuration {
        var config = Configuration()
        for key in root.keys.sorted() {
            guard let allowed = Self.sections[key] else {
                throw self.error(
                    key, nil,
                    "unknown section\(Self.didYouMean(key, Self.sections.keys)); known sections: \(Self.sections.keys.sorted().joined(separator: ", "))")
            }
            guard let table = root[key]?.table else {
                throw self.error(key, root[key], "must be a table: write it as [\(key)]")
            }
            for sub in table.keys where !allowed.contains(sub) {
                throw self.error(
                    "\(key).\(sub)", table[sub],
                    "unknown key\(Self.didYouMean(sub, allowed)); known keys in [\(key)]: \(allowed.sorted().joined(separator: ", "))")
            }
        }
        let t = { (name: String) -> TOMLTable? in root[name]?.table }

        if let u = t("upstream") {
            if let v = u["url"] {
                let s = try self.string(v, "upstream.url")
                do {
                    config.upstream.url = try UpstreamURL(parsing: s)
                } catch {
                    // Never echo a password back: the value is shown with credentials masked.
                    throw ConfigurationError(
                        file: self.fileName, line: self.lines.line(of: "upstream.url"), key: "upstream.url", value: "\"\(UpstreamURL.redacted(s))\"",
                        problem: error.description)
                }
            }
            if let v = u["headers"] {
                guard let h = v.table else { throw self.error("upstream.headers", v, "must be a table of \"Name\" = \"value\" strings") }
                var headers: [Configuration.Upstream.Header] = []
                for name in h.keys.sorted() {
                    let value = try self.string(h[name]!, "upstream.headers.\(name)")
                    if let problem = Self.headerProblem(name: name, value: value) {
                        // A bad value is not echoed: it may be a secret.
                        throw self.error("upstream.headers.\(name)", problem.nameIsBad ? h[name] : nil, problem.text)
                    }
                    headers.append(.init(name: name, value: value))
                }
                config.upstream.headers = headers
            }
            if let v = u["subprotocols"] {
                guard let a = v.array else { throw self.error("upstream.subprotocols", v, "must be an array of strings, e.g. [\"v1.chat\"]") }
                config.upstream.subprotocols = try a.map { (item: any TOMLValueConvertible) throws(ConfigurationError) -> String in
                    let s = try self.string(item, "upstream.subprotocols")
                    guard Self.isToken(s) else {
                        throw self.error("upstream.subprotocols", item, "a subprotocol must be an HTTP token (letters, digits, !#$%&'*+-.^_`|~)")
                    }
                    return s
                }
            }
            if let v = u["compression"] { config.upstream.compression = try self.bool(v, "upstream.compression") }
            if let v = u["max_message_size"] {
                config.upstream.maxMessageSize = try self.int(v, "upstream.max_message_size", in: 125...(1 << 30), "a byte count from 125 to 1073741824")
            }
            if let v = u["connect_timeout"] { config.upstream.connectTimeout = try self.duration(v, "upstream.connect_timeout") }
            if let v = u["connect_on_start"] { config.upstream.connectOnStart = try self.bool(v, "upstream.connect_on_start") }
            if let v = u["fallback_urls"] {
                guard let a = v.array else { throw self.error("upstream.fallback_urls", v, "must be a list of URLs: [\"wss://backup.example/ws\"]") }
                config.upstream.fallbackURLs = try a.map { (item: any TOMLValueConvertible) throws(ConfigurationError) -> UpstreamURL in
                    let s = try self.string(item, "upstream.fallback_urls")
                    do {
                        return try UpstreamURL(parsing: s)
                    } catch {
                        throw ConfigurationError(
                            file: self.fileName, line: self.lines.line(of: "upstream.fallback_urls"), key: "upstream.fallback_urls",
                            value: "\"\(UpstreamURL.redacted(s))\"", problem: "\(error)")
                    }
                }
            }
            if let v = u["failback_after"] {
                let s = v.string
                config.upstream.failbackAfter = s == "" ? nil : try self.duration(v, "upstream.failback_after")
            }
            if let v = u["on_open"] {
                guard let a = v.array else {
                    throw self.error("upstream.on_open", v, "must be a list of texts: ['{\"op\":\"auth\",\"token\":\"${token}\"}']")
                }
                config.upstream.onOpen = try a.map { (item: any TOMLValueConvertible) throws(ConfigurationError) -> OpeningMessage in
                    let s = try self.string(item, "upstream.on_open")
                    guard !s.isEmpty else { throw self.error("upstream.on_open", item, "an opening message must not be empty") }
                    do throws(PlaceholderError) {
                        return try OpeningMessage(parsing: s)
                    } catch {
                        throw self.error("upstream.on_open", item, error.description)
                    }
                }
            }
            if let v = u["ready_when"] {
                let s = try self.string(v, "upstream.ready_when")
                if !s.isEmpty {
                    let filter = Filter(parsing: s)
                    guard !filter.field.isEmpty, !filter.path.contains(where: { $0.key.isEmpty }) else {
                        throw self.error(
                            "upstream.ready_when", v, "must be FIELD=VALUE or FIELD, as in tail --filter: \"type=authed\" or \"result.session\"")
                    }
                    config.upstream.readyWhen = filter
                }
            }
            if let v = u["ready_timeout"] { config.upstream.readyTimeout = try self.duration(v, "upstream.ready_timeout") }
        }
        if let a = t("auth"), let v = a["token_file"] {
            config.auth.tokenFile = try self.path(v, "auth.token_file")
        }
        if let s = t("tls") {
            if let v = s["ca_file"] { config.tls.caFile = try self.path(v, "tls.ca_file") }
            if let v = s["cert_file"] { config.tls.certFile = try self.path(v, "tls.cert_file") }
            if let v = s["key_file"] { config.tls.keyFile = try self.path(v, "tls.key_file") }
            if let v = s["server_name"] {
                let name = try self.string(v, "tls.server_name")
                config.tls.serverName = name.isEmpty ? nil : name
            }
            if let v = s["insecure"] { config.tls.insecure = try self.bool(v, "tls.insecure") }
            if (config.tls.certFile == nil) != (config.tls.keyFile == nil) {
                let key = config.tls.certFile == nil ? "tls.cert_file" : "tls.key_file"
                throw self.error(key, nil, "tls.cert_file and tls.key_file go together: set both for mutual TLS, or neither")
            }
        }
        if let p = t("proxy") {
            if let v = p["url"] {
                let s = try self.string(v, "proxy.url")
                if !s.isEmpty {
                    guard let url = ProxyURL(parsing: s) else {
                        throw ConfigurationError(
                            file: self.fileName, line: self.lines.line(of: "proxy.url"), key: "proxy.url", value: "\"\(UpstreamURL.redacted(s))\"",
                            problem: "use http://[USER:PASSWORD@]HOST:PORT (HTTP CONNECT) or socks5://[USER:PASSWORD@]HOST:PORT")
                    }
                    config.proxy.url = url
                }
            }
            if let v = p["use_environment"] { config.proxy.useEnvironment = try self.bool(v, "proxy.use_environment") }
        }
        if let h = t("heartbeat") {
            if let v = h["interval"] { config.heartbeat.interval = try self.duration(v, "heartbeat.interval") }
            if let v = h["deadline"] { config.heartbeat.deadline = try self.duration(v, "heartbeat.deadline") }
            if let v = h["text"] {
                let s = try self.string(v, "heartbeat.text")
                config.heartbeat.text = s.isEmpty ? nil : s
            }
        }
        if let b = t("backoff") {
            if let v = b["base"] { config.backoff.policy.base = try self.duration(v, "backoff.base") }
            if let v = b["cap"] { config.backoff.policy.cap = try self.duration(v, "backoff.cap") }
            if let v = b["stable_after"] { config.backoff.policy.stableAfter = try self.duration(v, "backoff.stable_after", allowZero: true) }
            if let v = b["max_attempts"] {
                config.backoff.maxAttempts = try self.int(v, "backoff.max_attempts", in: 0...1_000_000, "a whole number, 0 for unlimited")
            }
            if config.backoff.policy.cap < config.backoff.policy.base {
                throw self.error("backoff.cap", b["cap"], "must be at least backoff.base (\(config.backoff.policy.base.short))")
            }
        }
        if let r = t("reachability") {
            if let v = r["enabled"] { config.reachability.enabled = try self.bool(v, "reachability.enabled") }
            if let v = r["poll_interval"] { config.reachability.pollInterval = try self.duration(v, "reachability.poll_interval") }
        }
        if let l = t("local") {
            if let v = l["socket"] {
                guard let socket = try self.path(v, "local.socket") else {
                    throw self.error("local.socket", v, "must not be empty: give the socket's absolute path")
                }
                config.local.socket = socket
            }
            if let v = l["mode"] {
                if let n = v.int {
                    // TOML reads 660 as the decimal number 660, not as permissions.
                    throw self.error("local.mode", v, "write the permissions as a string in quotes: mode = \"0\(n)\"")
                }
                let s = try self.string(v, "local.mode")
                guard let mode = UInt32(s, radix: 8), mode <= 0o777, s.count >= 3 else {
                    throw self.error("local.mode", v, "an octal permission string such as \"0660\" or \"0600\"")
                }
                config.local.mode = mode
            }
            if let v = l["group"] {
                let s = try self.string(v, "local.group")
                config.local.group = s.isEmpty ? nil : s
            }
            if let v = l["max_line"] {
                config.local.maxLine = try self.int(v, "local.max_line", in: 1024...(1 << 30), "a byte count from 1024 to 1073741824")
            }
            if let v = l["subscriber_queue"] {
                config.local.subscriberQueue = try self.int(v, "local.subscriber_queue", in: 1...10_000_000, "a message count from 1 to 10000000")
            }
            if let v = l["subscriber_queue_bytes"] {
                config.local.subscriberQueueBytes = try self.int(v, "local.subscriber_queue_bytes", in: 1024...(1 << 34), "a byte count from 1024")
            }
            if let v = l["replay"] {
                config.local.replay = try self.int(v, "local.replay", in: 0...10_000_000, "a message count from 0 (off) to 10000000")
            }
            if let v = l["replay_bytes"] {
                config.local.replayBytes = try self.int(v, "local.replay_bytes", in: 0...(1 << 34), "a byte count from 0 (off)")
            }
            if let v = l["inline_json"] { config.local.inlineJSON = try self.bool(v, "local.inline_json") }
            if let v = l["max_clients"] {
                config.local.maxClients = try self.int(v, "local.max_clients", in: 1...1_000_000, "a client count from 1 to 1000000")
            }
            if let v = l["client_output_bytes"] {
                config.local.clientOutputBytes = try self.int(v, "local.client_output_bytes", in: 4096...(1 << 30), "a byte count from 4096 to 1073741824")
            }
            if let v = l["max_pending_requests"] {
                config.local.maxPendingRequests = try self.int(
                    v, "local.max_pending_requests", in: 0...100_000, "a request count from 0 (no requests) to 100000")
            }
            if let v = l["max_pending_requests_total"] {
                config.local.maxPendingRequestsTotal = try self.int(
                    v, "local.max_pending_requests_total", in: 0...1_000_000, "a request count from 0 (no requests) to 1000000")
            }
            if let v = l["filter_max_bytes"] {
                config.local.filterMaxBytes = try self.int(v, "local.filter_max_bytes", in: 1...65536, "a byte count from 1 to 65536")
            }
            if let v = l["filter_max_depth"] {
                config.local.filterMaxDepth = try self.int(v, "local.filter_max_depth", in: 1...1024, "a component count from 1 to 1024")
            }
            if let v = l["sticky_keys_per_client"] {
                config.local.stickyKeysPerClient = try self.int(
                    v, "local.sticky_keys_per_client", in: 0...100_000, "a key count from 0 (no sticky sends) to 100000")
            }
            if let v = l["sticky_keys"] {
                config.local.stickyKeys = try self.int(v, "local.sticky_keys", in: 0...1_000_000, "a key count from 0 (no sticky sends) to 1000000")
            }
            if let v = l["sticky_bytes"] {
                config.local.stickyBytes = try self.int(v, "local.sticky_bytes", in: 0...(1 << 30), "a byte count from 0 to 1073741824")
            }
        }
        if let q = t("queue") {
            if let v = q["max_messages"] {
                config.queue.maxMessages = try self.int(v, "queue.max_messages", in: 0...10_000_000, "a message count from 0 (no queueing) to 10000000")
            }
            if let v = q["max_bytes"] {
                config.queue.maxBytes = try self.int(v, "queue.max_bytes", in: 0...(1 << 34), "a byte count from 0")
            }
            if let v = q["spool"] {
                let s = try self.string(v, "queue.spool")
                guard s.isEmpty || s.hasPrefix("/") else {
                    throw self.error(
                        "queue.spool", v, "must be an absolute directory path such as \"/var/lib/wsbridged/spool\", or \"\" to keep the queue in memory only")
                }
                config.queue.spool = s.isEmpty ? nil : s
            }
            if let v = q["fsync"] {
                let s = try self.string(v, "queue.fsync")
                guard let policy = Configuration.FsyncPolicy(rawValue: s.lowercased()) else {
                    throw self.error(
                        "queue.fsync", v,
                        "must be \"always\" (each queued send is fdatasync'd before it is answered) or \"batch\" (written at once, fdatasync'd within a second)"
                    )
                }
                config.queue.fsync = policy
            }
        }
        if let a = t("access") {
            if let v = a["write_uids"] {
                guard let array = v.array else { throw self.error("access.write_uids", v, "must be an array of user ids, e.g. [1000, 1001]") }
                config.access.writeUIDs = try array.map { (item: any TOMLValueConvertible) throws(ConfigurationError) -> UInt32 in
                    UInt32(try self.int(item, "access.write_uids", in: 0...Int(UInt32.max - 1), "a numeric user id"))
                }
            }
            if let v = a["write_groups"] {
                guard let array = v.array else { throw self.error("access.write_groups", v, "must be an array of group names, e.g. [\"wsbridge\"]") }
                config.access.writeGroups = try array.map { (item: any TOMLValueConvertible) throws(ConfigurationError) -> String in
                    try self.string(item, "access.write_groups")
                }
            }
        }
        if let l = t("log"), let v = l["level"] {
            let s = try self.string(v, "log.level")
            guard let level = Configuration.LogLevel(rawValue: s.lowercased()) else {
                throw self.error("log.level", v, "one of \(Configuration.LogLevel.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            config.log.level = level
        }
        if config.upstream.onOpen.contains(where: \.usesToken) && config.auth.tokenFile == nil {
            throw self.error("upstream.on_open", nil, "${token} needs auth.token_file: set it to the file holding the token")
        }
        if let m = t("metrics") {
            if let v = m["listen"] {
                let s = try self.string(v, "metrics.listen")
                if !s.isEmpty {
                    guard let address = Configuration.HostPort(parsing: s) else {
                        throw self.error(
                            "metrics.listen", v,
                            "must be \"HOST:PORT\" or \"[IPv6]:PORT\", such as \"127.0.0.1:9464\" (empty: no HTTP endpoint)")
                    }
                    config.metrics.listen = address
                }
            }
            if let v = m["max_connections"] {
                config.metrics.maxConnections = try self.int(v, "metrics.max_connections", in: 1...1024, "a whole number from 1 to 1024")
            }
        }
        return config
    }

    /// What is wrong with a header, if anything (the same rules for the file and `--header`).
    static func headerProblem(name: String, value: String) -> (text: String, nameIsBad: Bool)? {
        guard Self.isToken(name) else { return ("invalid header name: use letters, digits and - only", true) }
        let reserved = [
            "host", "upgrade", "connection", "sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions", "sec-websocket-protocol",
        ]
        guard !reserved.contains(name.lowercased()) else {
            return ("this header is set by wsbridged itself; use upstream.subprotocols / upstream.compression instead", true)
        }
        guard !value.contains("\r") && !value.contains("\n") else { return ("header values must not contain line breaks", false) }
        return nil
    }

    /// ` (did you mean "x"?)` for the closest known name (at most a third of it mistyped), or "".
    static func didYouMean(_ name: String, _ known: some Collection<String>) -> String {
        guard let best = Suggestion.closest(to: name, in: known) else { return "" }
        return " (did you mean \"\(best)\"?)"
    }

    func string(_ v: any TOMLValueConvertible, _ key: String) throws(ConfigurationError) -> String {
        guard let s = v.string else { throw self.error(key, v, "must be a string in quotes, not a \(v.type)") }
        return s
    }

    func path(_ v: any TOMLValueConvertible, _ key: String) throws(ConfigurationError) -> String? {
        let s = try self.string(v, key)
        if s.isEmpty { return nil }
        guard s.hasPrefix("/") || s.hasPrefix(".") || s.hasPrefix("${CREDENTIALS_DIRECTORY}/") else {
            throw self.error(key, v, "must be an absolute path (starting with /), or ${CREDENTIALS_DIRECTORY}/NAME for a systemd credential")
        }
        return s
    }

    func bool(_ v: any TOMLValueConvertible, _ key: String) throws(ConfigurationError) -> Bool {
        guard let b = v.bool else { throw self.error(key, v, "must be true or false (without quotes)") }
        return b
    }

    func int(_ v: any TOMLValueConvertible, _ key: String, in range: ClosedRange<Int>, _ accepted: String) throws(ConfigurationError) -> Int {
        guard let i = v.int else { throw self.error(key, v, "must be \(accepted)") }
        guard range.contains(i) else { throw self.error(key, v, "out of range: must be \(accepted)") }
        return i
    }

    /// A duration: a number of seconds (`20`, `0.5`) or a string with a unit (`"500ms"`, `"20s"`, `"2m"`, `"1h"`).
    func duration(_ v: any TOMLValueConvertible, _ key: String, allowZero: Bool = false) throws(ConfigurationError) -> Duration {
        let accepted = "a duration \(allowZero ? ">= 0" : "> 0"): seconds as a number (20, 0.5) or a string with a unit (\"500ms\", \"20s\", \"2m\", \"1h\")"
        var seconds: Double?
        if let i = v.int {
            seconds = Double(i)
        } else if let d = v.double {
            seconds = d
        } else if let s = v.string {
            seconds = Self.parseDuration(s)
        }
        guard let seconds, seconds.isFinite, seconds >= 0, seconds <= 86_400 * 365 else {
            throw self.error(key, v, "must be \(accepted)")
        }
        if seconds == 0 && !allowZero { throw self.error(key, v, "must be \(accepted)") }
        return .nanoseconds(Int64((seconds * 1e9).rounded()))
    }

    static func parseDuration(_ s: String) -> Double? {
        let t = s.trimmingSpaces()
        let units: [(String, Double)] = [("ms", 0.001), ("us", 1e-6), ("s", 1), ("m", 60), ("h", 3600)]
        for (suffix, factor) in units where t.hasSuffix(suffix) {
            guard let n = Double(t.dropLast(suffix.count).trimmingSpaces()) else { return nil }
            return n * factor
        }
        return Double(t)
    }

    static func isToken(_ s: String) -> Bool {
        !s.isEmpty
            && s.utf8.allSatisfy { c in
                (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
                    || "!#$%&'*+-.^_`|~".utf8.contains(c)
            }
    }
}

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
        if let problem = Reader.headerProblem(name: name, value: value) {
            throw ConfigurationError(file: "--header", key: "upstream.headers.\(name)", value: problem.nameIsBad ? name : nil, problem: problem.text)
        }
        return .init(name: name, value: value)
    }

    /// `--subprotocol NAME`.
    public static func subprotocol(_ text: String) throws(ConfigurationError) -> String {
        guard Reader.isToken(text) else {
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

    /// `--token-file`, `--ca-file`: an absolute path (or ./relative, from the working directory).
    public static func path(_ text: String, flag: String, key: String) throws(ConfigurationError) -> String {
        guard text.hasPrefix("/") || text.hasPrefix(".") else {
            throw ConfigurationError(file: flag, key: key, value: text, problem: "must be a path starting with / or ./")
        }
        return text
    }
}
