import TOMLKit
import WSBridgeProtocol

/// Reads `wsbridged.toml` into a validated `Configuration`.
///
/// Unknown keys are errors (a typo must not silently fall back to a default); every error names
/// the file, line, key, the bad value and what is accepted.
public struct ConfigurationLoader: Sendable {
    public var fileName: String
    /// Whether the file must name `upstream.url` (the daemon's file does, unless `--url` gives it).
    public var requiresURL: Bool

    public init(fileName: String, requiresURL: Bool = false) {
        self.fileName = fileName
        self.requiresURL = requiresURL
    }

    /// Parses and validates TOML text. `environment` is consulted for nothing here; overrides
    /// from the command line are applied by the caller afterwards with `validate`.
    public func load(text: String) throws(ConfigurationError) -> Configuration {
        try Self.checkTableHeaders(text, fileName: self.fileName)
        try Self.checkNULEscapes(text, fileName: self.fileName)
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
        let reader = ConfigurationReader(fileName: self.fileName, lines: LineIndex(text: text), requiresURL: self.requiresURL)
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

/// One [section] of the file, handed to its reader: it gives the value of each key the reader
/// asks for and records the key as known, so what is left over is an unknown key.
struct Section {
    let name: String
    /// The file, for the errors this section records itself.
    let fileName: String
    private let table: TOMLTable?
    private(set) var known: [String] = []
    /// When a change to this section's keys takes effect, unless a key says otherwise.
    let reload: ReloadEffect
    /// The keys the file set that were read, as written, with when a change takes effect.
    private(set) var fileKeys: [String: Configuration.FileKey] = [:]

    init(name: String, fileName: String, table: TOMLTable?, reload: ReloadEffect = .now) {
        self.name = name
        self.fileName = fileName
        self.table = table
        self.reload = reload
    }

    /// The value the file gives `key` (nil when it sets none); `key` is a key of this section.
    subscript(key: String) -> (any TOMLValueConvertible)? {
        mutating get { self.value(key, reload: nil) }
    }

    /// The value the file gives `key`, recorded with when a change to it takes effect (`reload`,
    /// or the section's).
    private mutating func value(_ key: String, reload: ReloadEffect?) -> (any TOMLValueConvertible)? {
        self.known.append(key)
        guard let value = self.table?[key] else { return nil }
        let effect = reload ?? self.fileKeys["\(self.name).\(key)"]?.reload ?? self.reload
        self.fileKeys["\(self.name).\(key)"] = .init(value: ConfigurationReader.render(value), reload: effect)
        return value
    }

    /// The problems with single keys, in the order they were read.
    private(set) var problems: [ConfigurationError] = []

    /// A problem with several keys of this section together, found once all were read.
    mutating func problem(_ error: ConfigurationError) { self.problems.append(error) }

    /// Reads `key` when the file sets it. A problem with its value is recorded and reading goes
    /// on with the next key, so that one run reports every mistake in the file.
    /// (`body` is untyped `throws` because a closure's thrown type is not inferred from its
    /// context; the readers throw only ConfigurationError.)
    /// `reload`: when a change to this key takes effect, where it is not the section's.
    mutating func read(_ key: String, reload: ReloadEffect? = nil, _ body: (any TOMLValueConvertible) throws -> Void) {
        guard let value = self.value(key, reload: reload) else { return }
        do {
            try body(value)
        } catch let error as ConfigurationError {
            self.problems.append(error)
        } catch {
            self.problems.append(ConfigurationError(file: self.fileName, key: "\(self.name).\(key)", problem: "\(error)"))
        }
    }

    /// A table of this section's (`[upstream.limits]`), read by `body` as a section of its own
    /// named `NAME.KEY`, its keys taking effect as this section's do: its problems and its keys
    /// become this section's, and a key `body` did not read is a problem.
    mutating func table(_ key: String, reader: ConfigurationReader, _ body: (inout Section) -> Void) {
        self.known.append(key)
        guard let value = self.table?[key] else { return }
        let name = "\(self.name).\(key)"
        guard let table = value.table else {
            self.problems.append(reader.error(name, value, "must be a table: write it as [\(name)]"))
            return
        }
        var inner = Section(name: name, fileName: self.fileName, table: table, reload: self.reload)
        body(&inner)
        self.problems += inner.problems
        self.fileKeys.merge(inner.fileKeys) { $1 }
        for unknown in inner.unknownKeys {
            self.problems.append(
                reader.error(
                    "\(name).\(unknown)", table[unknown],
                    "unknown key\(ConfigurationReader.didYouMean(unknown, inner.known)); known keys in [\(name)]: \(inner.known.sorted().joined(separator: ", "))"
                ))
        }
    }

    /// The file's keys in this section that no reader asked for, sorted.
    var unknownKeys: [String] {
        (self.table?.keys ?? []).filter { !self.known.contains($0) }.sorted()
    }
}

/// Reads a parsed file section by section (the readers are in ConfigurationLoader+Upstream and
/// +Sections), with the value checks they share and errors that name file, line and key.
struct ConfigurationReader {
    var fileName: String
    var lines: LineIndex
    var requiresURL = false

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

    /// The sections in the order they are read, each with its reader and when a change to its
    /// keys takes effect on a running daemon (a key that differs says so where it is read). A
    /// section's keys are the ones its reader asks for: there is no second list to keep in step.
    static var readers:
        [(name: String, reload: ReloadEffect, read: (ConfigurationReader) -> (inout Section, inout Configuration) throws(ConfigurationError) -> Void)]
    {
        [
            ("upstream", .nextConnection, ConfigurationReader.upstream),
            ("auth", .nextConnection, ConfigurationReader.auth),
            ("tls", .nextConnection, ConfigurationReader.tls),
            ("proxy", .nextConnection, ConfigurationReader.proxy),
            ("heartbeat", .now, ConfigurationReader.heartbeat),
            ("backoff", .now, ConfigurationReader.backoff),
            ("reachability", .now, ConfigurationReader.reachability),
            ("local", .now, ConfigurationReader.local),
            ("queue", .now, ConfigurationReader.queue),
            ("journal", .restart, ConfigurationReader.journal),
            ("access", .now, ConfigurationReader.access),
            ("log", .restart, ConfigurationReader.logging),
            ("metrics", .restart, ConfigurationReader.metrics),
            ("protocol", .restart, ConfigurationReader.applicationProtocol),
            ("fleet", .restart, ConfigurationReader.fleet),
        ]
    }

    /// Reads every section and key. Every problem is collected, and they are reported together
    /// in file order (the first one thrown, the others in its `further`).
    func read(_ root: TOMLTable) throws(ConfigurationError) -> Configuration {
        var config = Configuration()
        var problems: [ConfigurationError] = []
        let names = Self.readers.map(\.name)
        for key in root.keys.sorted() where !names.contains(key) {
            problems.append(self.error(key, nil, "unknown section\(Self.didYouMean(key, names)); known sections: \(names.sorted().joined(separator: ", "))"))
        }
        for (name, reload, read) in Self.readers {
            var table: TOMLTable?
            if let value = root[name] {
                guard let t = value.table else {
                    problems.append(self.error(name, value, "must be a table: write it as [\(name)]"))
                    continue
                }
                table = t
            }
            var section = Section(name: name, fileName: self.fileName, table: table, reload: reload)
            do {
                // Throws only for what involves more than one key (tls.cert_file with tls.key_file).
                try read(self)(&section, &config)
            } catch {
                problems.append(error)
            }
            problems += section.problems
            config.fileKeys.merge(section.fileKeys) { $1 }
            for unknown in section.unknownKeys {
                problems.append(
                    self.error(
                        "\(name).\(unknown)", table?[unknown],
                        "unknown key\(Self.didYouMean(unknown, section.known)); known keys in [\(name)]: \(section.known.sorted().joined(separator: ", "))"))
            }
        }
        // A fleet's follower takes its upstream from the stream.
        let follows = config.fleet.isOn && config.fleet.role == .follower
        if self.requiresURL && !follows && root["upstream"]?.table?["url"] == nil {
            problems.append(
                ConfigurationError(
                    file: self.fileName, line: self.lines.line(of: "upstream") ?? 1, key: "upstream.url", value: nil,
                    problem: "is required: set url = \"ws://HOST:PORT/PATH\" (or wss://) in [upstream], or pass --url"))
        }
        problems += self.applyProtocol(&config)
        if config.upstream.onOpen.contains(where: \.usesToken) && config.auth.tokenFile == nil {
            problems.append(self.error("upstream.on_open", nil, "${token} needs auth.token_file: set it to the file holding the token"))
        }
        if let first = ConfigurationError.inFileOrder(problems) { throw first }
        return config
    }

    /// What `upstream.protocol` brings to the rest (its codec's `connection`): its handshake
    /// becomes the first opening message (so `${token}` is filled in at each connect) and its
    /// acknowledgement the ready gate, its subprotocol is offered, its keepalive text goes with
    /// each ping. A key of another protocol's is a problem.
    func applyProtocol(_ config: inout Configuration) -> [ConfigurationError] {
        let settings = config.applicationProtocol
        if let connection = settings.kind.codec?.connection(settings) {
            if let text = connection.opening, let opening = try? OpeningMessage(parsing: text) { config.upstream.onOpen.insert(opening, at: 0) }
            if config.upstream.readyWhen == nil { config.upstream.readyWhen = connection.readyWhen }
            if let p = connection.subprotocol, !config.upstream.subprotocols.contains(p) { config.upstream.subprotocols.append(p) }
            if config.heartbeat.text == nil { config.heartbeat.text = connection.heartbeatText }
        }
        var problems: [ConfigurationError] = []
        let owners: [(String, Bool, Configuration.ApplicationProtocol.Kind)] = [
            ("namespace", settings.namespace != nil, .socketio), ("auth", settings.auth != nil, .socketio),
            ("login", settings.login != nil, .stomp), ("passcode", settings.passcode != nil, .stomp), ("host", settings.host != nil, .stomp),
            ("heart_beat", settings.heartBeat != nil, .stomp), ("user", settings.user != nil, .nats), ("pass", settings.pass != nil, .nats),
            ("token", settings.token != nil, .nats), ("name", settings.clientName != nil, .nats),
        ]
        for (key, set, owner) in owners where set && settings.kind != owner {
            problems.append(
                self.error(
                    "protocol.\(key)", nil,
                    "is a setting of upstream.protocol = \"\(owner.rawValue)\", not of \"\(settings.kind.rawValue)\": remove it or change upstream.protocol"))
        }
        if settings.kind != .raw && config.journal.dir != nil {
            // Messages for one app take their seq in the stream but stay out of the journal,
            // whose replay would take the skipped seqs for damage.
            problems.append(
                self.error(
                    "journal.dir", nil,
                    "cannot be set with upstream.protocol = \"\(settings.kind.rawValue)\" in this version (the journal would report the seqs of messages routed to one app as damaged): leave journal.dir empty, or use upstream.protocol = \"raw\""
                ))
        }
        if settings.kind != .graphqlTransportWS && settings.initPayload != nil {
            problems.append(
                self.error(
                    "protocol.init_payload", nil,
                    "is a setting of upstream.protocol = \"graphql-transport-ws\", not of \"\(settings.kind.rawValue)\": remove it or change upstream.protocol")
            )
        }
        if settings.kind != .json && (settings.idPath != nil || !settings.replies.isEmpty) {
            problems.append(
                self.error(
                    settings.idPath != nil ? "protocol.id" : "protocol.reply", nil,
                    "is a setting of upstream.protocol = \"json\", not of \"\(settings.kind.rawValue)\": remove it or change upstream.protocol"))
        }
        return problems
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

    /// A path: absolute, `${CREDENTIALS_DIRECTORY}/NAME` (a systemd credential), or relative to
    /// the configuration file's folder.
    func path(_ v: any TOMLValueConvertible, _ key: String) throws(ConfigurationError) -> String? {
        let s = try self.string(v, key)
        if s.isEmpty { return nil }
        if s.hasPrefix("/") || s.hasPrefix("${CREDENTIALS_DIRECTORY}/") { return s }
        guard !s.contains("\0") else { throw self.error(key, v, "must be a path (it holds a NUL character)") }
        let folder = self.fileName.lastIndex(of: "/").map { String(self.fileName[..<$0]) } ?? "."
        return FilePath.absolute(s, in: folder.isEmpty ? "/" : folder)
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

}
