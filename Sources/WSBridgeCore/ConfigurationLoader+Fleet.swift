import TOMLKit

/// `[fleet]`: the NATS JetStream stream the upstream's messages are published into (docs/fleet.md).
extension ConfigurationReader {
    func fleet(_ s: inout Section, _ config: inout Configuration) throws(ConfigurationError) {
        s.read("servers") { v in
            guard let a = v.array else { throw self.error("fleet.servers", v, "must be a list of NATS server URLs, e.g. [\"nats://10.0.0.1:4222\"]") }
            config.fleet.servers = try a.map { (item: any TOMLValueConvertible) throws(ConfigurationError) -> String in
                let url = try self.string(item, "fleet.servers")
                guard Self.isNATSURL(url) else {
                    throw self.error(
                        "fleet.servers", item, "must be nats://HOST:PORT or tls://HOST:PORT (a server of the NATS cluster), e.g. \"nats://10.0.0.1:4222\"")
                }
                return url
            }
        }
        s.read("role") { v in
            let role = try self.string(v, "fleet.role")
            guard let parsed = Configuration.Fleet.Role(rawValue: role) else {
                throw self.error(
                    "fleet.role", v, "must be \"bridge\" (holds the upstream, publishes into the stream) or \"follower\" (its upstream is the stream)")
            }
            config.fleet.role = parsed
        }
        s.read("standby") { v in
            let standby = try self.string(v, "fleet.standby")
            guard let parsed = Configuration.Fleet.Standby(rawValue: standby) else {
                throw self.error(
                    "fleet.standby", v,
                    "must be \"none\" (one bridge), \"cold\" (only the leader connects upstream) or \"hot\" (all connect and publish, JetStream drops the duplicates)"
                )
            }
            config.fleet.standby = parsed
        }
        s.read("lease_bucket") { v in
            let bucket = try self.string(v, "fleet.lease_bucket")
            guard !bucket.isEmpty, bucket.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }) else {
                throw self.error("fleet.lease_bucket", v, "must be a key-value bucket's name: letters, digits, - and _")
            }
            config.fleet.leaseBucket = bucket
        }
        s.read("lease_ttl") { v in
            let ttl = try self.duration(v, "fleet.lease_ttl")
            guard ttl >= .seconds(1) else { throw self.error("fleet.lease_ttl", v, "must be at least \"1s\" (the leader renews its lease 3 times in it)") }
            config.fleet.leaseTTL = ttl
        }
        s.read("user") { v in config.fleet.user = try self.nonEmpty(v, "fleet.user") }
        s.read("password") { v in config.fleet.password = try self.nonEmpty(v, "fleet.password") }
        s.read("token") { v in config.fleet.token = try self.nonEmpty(v, "fleet.token") }
        s.read("credentials") { v in config.fleet.credentials = try self.path(v, "fleet.credentials") }
        s.read("ca_file") { v in config.fleet.caFile = try self.path(v, "fleet.ca_file") }
        s.read("cert_file") { v in config.fleet.certFile = try self.path(v, "fleet.cert_file") }
        s.read("key_file") { v in config.fleet.keyFile = try self.path(v, "fleet.key_file") }
        s.read("stream") { v in
            let name = try self.string(v, "fleet.stream")
            guard !name.isEmpty, name.utf8.count <= 255, !name.contains(where: { " \t\r\n.*>/\\".contains($0) }) else {
                throw self.error("fleet.stream", v, "must be a JetStream stream name: up to 255 characters, none of space . * > / \\")
            }
            config.fleet.stream = name
        }
        var subjectValue: (any TOMLValueConvertible)?
        s.read("subject") { v in
            let subject = try self.string(v, "fleet.subject")
            guard let template = FleetSubject(subject) else {
                throw self.error("fleet.subject", v, "has a ${ that is not ${msg:PATH}, e.g. \"feeds.binance.${msg:s}\"")
            }
            guard Self.isSubject(template.filled("x"), wildcards: true) else {
                throw self.error("fleet.subject", v, "must be a NATS subject: tokens split by dots, none empty, no spaces, e.g. \"feed.binance\"")
            }
            config.fleet.subject = subject
            subjectValue = v
        }
        var requestsSet = false
        s.read("requests") { v in
            let subject = try self.string(v, "fleet.requests")
            guard Self.isSubject(subject) else {
                throw self.error(
                    "fleet.requests", v, "must be a NATS subject without wildcards, and not one of the stream's, e.g. \"wsbridge-requests.feed\"")
            }
            config.fleet.requests = subject
            requestsSet = true
        }
        s.read("max_in_flight") { v in
            config.fleet.maxInFlight = try self.int(v, "fleet.max_in_flight", in: 1...65536, "a count of messages from 1 to 65536")
        }
        s.read("batch") { v in
            config.fleet.batch = try self.int(v, "fleet.batch", in: 1...FleetBatch.maxMessages, "a count of messages from 1 (no batches) to 1000")
        }
        s.read("ack_timeout") { v in config.fleet.ackTimeout = try self.duration(v, "fleet.ack_timeout") }
        s.read("max_backlog_bytes") { v in
            config.fleet.maxBacklogBytes = try self.int(
                v, "fleet.max_backlog_bytes", in: (1 << 20)...(1 << 40), "a byte count of at least 1048576 (1 MiB)")
        }
        s.read("replicas") { v in
            config.fleet.replicas = try self.int(v, "fleet.replicas", in: 1...5, "a count of NATS servers from 1 to 5 (1, 3 or 5 in a cluster)")
        }
        s.read("duplicate_window") { v in
            let window = try self.duration(v, "fleet.duplicate_window")
            guard window >= .seconds(1) else {
                throw self.error("fleet.duplicate_window", v, "must be at least \"1s\": as long as NATS may be away, e.g. \"2m\"")
            }
            config.fleet.duplicateWindow = window
        }
        s.read("library") { v in
            let library = try self.string(v, "fleet.library")
            guard !library.isEmpty else { throw self.error("fleet.library", v, "must name the NATS C client's library, e.g. \"libnats.so.3.4\"") }
            config.fleet.library = library
        }
        if !requestsSet { config.fleet.requests = "wsbridge-requests.\(config.fleet.stream)" }
        let fleet = config.fleet
        if fleet.standby != .none, fleet.role == .follower {
            throw self.error("fleet.standby", nil, "is for bridges: a follower stands by for nothing (leave it out, or set role = \"bridge\")")
        }
        if fleet.standby == .hot, config.upstream.dedupe.isEmpty {
            throw self.error(
                "fleet.standby", nil,
                "\"hot\" needs upstream.dedupe: the JSON paths that tell one upstream message from another (e.g. [\"s\", \"E\"]), so JetStream keeps each once from the bridges that all publish it"
            )
        }
        if fleet.standby == .hot, fleet.batch > 1 {
            throw self.error(
                "fleet.batch", nil,
                "must be 1 with standby = \"hot\": hot bridges publish each message under an id of its own, so that JetStream keeps one copy of it, and two bridges' batches would hold different messages (use \"cold\" to batch)"
            )
        }
        if fleet.role == .follower, FleetSubject(fleet.subject)?.isTemplate == true {
            throw self.error(
                "fleet.subject", subjectValue,
                "takes ${msg:PATH} on a bridge only: a follower takes the subjects it wants by wildcards, e.g. \"feeds.binance.>\"")
        }
        if fleet.role == .bridge, !Self.isSubject(FleetSubject(fleet.subject)?.filled("x") ?? fleet.subject) {
            throw self.error(
                "fleet.subject", subjectValue,
                "is where a bridge publishes, so it takes no wildcards (* or >; a follower's may have them, to take some of the stream's subjects), e.g. \"feed.binance\""
            )
        }
        if (fleet.user == nil) != (fleet.password == nil) {
            throw self.error(fleet.user == nil ? "fleet.password" : "fleet.user", nil, "fleet.user and fleet.password go together: set both, or neither")
        }
        if [fleet.user != nil, fleet.token != nil, fleet.credentials != nil].filter({ $0 }).count > 1 {
            throw self.error("fleet.token", nil, "set one way to log in to NATS: fleet.user with fleet.password, or fleet.token, or fleet.credentials")
        }
        if (fleet.certFile == nil) != (fleet.keyFile == nil) {
            throw self.error(
                fleet.certFile == nil ? "fleet.key_file" : "fleet.cert_file", nil,
                "fleet.cert_file and fleet.key_file go together: set both for a client certificate, or neither")
        }
        if !fleet.isOn, fleet != Configuration.Fleet() {
            throw self.error("fleet.servers", nil, "is empty, so the other [fleet] keys do nothing: list the NATS servers, or leave [fleet] out")
        }
    }

    private func nonEmpty(_ v: any TOMLValueConvertible, _ key: String) throws(ConfigurationError) -> String? {
        let s = try self.string(v, key)
        return s.isEmpty ? nil : s
    }

    static func isNATSURL(_ url: String) -> Bool {
        let scheme = url.prefix { $0 != ":" }
        guard ["nats", "tls"].contains(scheme), url.dropFirst(scheme.count).hasPrefix("://") else { return false }
        let rest = url.dropFirst(scheme.count + 3)
        return !rest.isEmpty && !rest.contains(where: { $0 == " " || $0 == "/" && rest.last != "/" })
    }

    /// A NATS subject; with `wildcards`, tokens may be `*`, and the last `>`.
    static func isSubject(_ subject: String, wildcards: Bool = false) -> Bool {
        let tokens = subject.split(separator: ".", omittingEmptySubsequences: false)
        return !subject.isEmpty
            && tokens.enumerated().allSatisfy { index, token in
                if wildcards && (token == "*" || token == ">" && index == tokens.count - 1) { return true }
                return !token.isEmpty && !token.contains(where: { $0 == " " || $0 == "\t" || $0 == "*" || $0 == ">" })
            }
    }
}
