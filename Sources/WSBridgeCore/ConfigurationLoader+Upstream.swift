import TOMLKit
import WSBridgeProtocol

/// The reader of [upstream], the largest section.
extension ConfigurationReader {
    /// [upstream]: the URL and its fallbacks, headers, subprotocols, compression, sizes and timeouts, the session.
    func upstream(_ s: inout Section, _ config: inout Configuration) throws(ConfigurationError) {
        s.read("url") { v in
            let s = try self.string(v, "upstream.url")
            do {
                config.upstream.url = try UpstreamURL(parsing: s)
            } catch {
                // Never echo a password back: the value is shown with credentials masked.
                throw ConfigurationError(
                    file: self.fileName, line: self.lines.line(of: "upstream.url"), key: "upstream.url", value: "\"\(UpstreamURL.redacted(s))\"",
                    problem: "\(error)")
            }
        }
        s.read("headers") { v in
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
        s.read("subprotocols") { v in
            guard let a = v.array else { throw self.error("upstream.subprotocols", v, "must be an array of strings, e.g. [\"v1.chat\"]") }
            config.upstream.subprotocols = try a.map { (item: any TOMLValueConvertible) throws(ConfigurationError) -> String in
                let s = try self.string(item, "upstream.subprotocols")
                guard Self.isToken(s) else {
                    throw self.error("upstream.subprotocols", item, "a subprotocol must be an HTTP token (letters, digits, !#$%&'*+-.^_`|~)")
                }
                return s
            }
        }
        s.read("compression") { v in config.upstream.compression = try self.bool(v, "upstream.compression") }
        s.read("max_message_size") { v in
            config.upstream.maxMessageSize = try self.int(v, "upstream.max_message_size", in: 125...(1 << 30), "a byte count from 125 to 1073741824")
        }
        s.read("connect_timeout") { v in config.upstream.connectTimeout = try self.duration(v, "upstream.connect_timeout") }
        s.read("connect_on_start") { v in config.upstream.connectOnStart = try self.bool(v, "upstream.connect_on_start") }
        s.read("fallback_urls") { v in
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
        s.read("failback_after") { v in
            let s = v.string
            config.upstream.failbackAfter = s == "" ? nil : try self.duration(v, "upstream.failback_after")
        }
        s.read("protocol", reload: .restart) { v in
            let name = try self.string(v, "upstream.protocol")
            guard let kind = Configuration.ApplicationProtocol.Kind(rawValue: name) else {
                let known = Configuration.ApplicationProtocol.Kind.allCases.map(\.rawValue)
                let hint = Suggestion.closest(to: name.lowercased(), in: known).map { " (did you mean \"\($0)\"?)" } ?? ""
                throw self.error("upstream.protocol", v, "one of \(known.joined(separator: ", "))\(hint)")
            }
            config.applicationProtocol.kind = kind
        }
        s.read("on_open") { v in
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
        s.read("ready_when") { v in
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
        s.read("ready_timeout") { v in config.upstream.readyTimeout = try self.duration(v, "upstream.ready_timeout") }
        s.table("limits", reader: self) { s in self.limits(&s, &config) }
        self.renewal(&s, &config)
    }

    /// A connection renewed with no gap (docs/limits.md): when, and how its overlap is told apart.
    func renewal(_ s: inout Section, _ config: inout Configuration) {
        s.read("max_lifetime", reload: .nextConnection) { v in
            config.upstream.maxLifetime = v.string == "" ? nil : try self.duration(v, "upstream.max_lifetime")
        }
        s.read("renew_jitter", reload: .nextConnection) { v in
            config.upstream.renewJitter = v.string == "" ? nil : try self.duration(v, "upstream.renew_jitter", allowZero: true)
        }
        s.read("renew_when") { v in
            let s = try self.string(v, "upstream.renew_when")
            guard !s.isEmpty else { return }
            let filter = Filter(parsing: s)
            guard filter.wholeText != nil || (!filter.field.isEmpty && !filter.path.contains(where: { $0.key.isEmpty })) else {
                throw self.error(
                    "upstream.renew_when", v, "must be FIELD=VALUE or FIELD, as in tail --filter: \"e=serverShutdown\" or \"event=closing\"")
            }
            config.upstream.renewWhen = filter
        }
        s.read("renew_timeout") { v in config.upstream.renewTimeout = try self.duration(v, "upstream.renew_timeout") }
        s.read("dedupe") { v in
            guard let a = v.array else { throw self.error("upstream.dedupe", v, "must be a list of paths in the message, e.g. [\"stream\", \"data.u\"]") }
            config.upstream.dedupe = try a.map { (item: any TOMLValueConvertible) throws(ConfigurationError) -> String in
                let path = try self.string(item, "upstream.dedupe")
                guard !path.isEmpty, !JSONValue.PathComponent.split(path).contains(where: { $0.key.isEmpty }) else {
                    throw self.error("upstream.dedupe", item, "a path names a field, its parts split by dots: \"data.u\"")
                }
                return path
            }
        }
        s.read("subscriptions_per_connection", reload: .restart) { v in
            let n = try self.int(v, "upstream.subscriptions_per_connection", in: 0...1_000_000, "a count of subscriptions from 1 to 1000000 (0: no pool)")
            config.upstream.subscriptionsPerConnection = n == 0 ? nil : n
        }
        s.read("connections", reload: .restart) { v in
            config.upstream.connections = try self.int(v, "upstream.connections", in: 1...1000, "a count of connections from 1 to 1000")
        }
        s.read("subscription_weight", reload: .restart) { v in
            let path = try self.string(v, "upstream.subscription_weight")
            guard !path.isEmpty else { return }
            guard !JSONValue.PathComponent.split(path).contains(where: { $0.key.isEmpty }) else {
                throw self.error("upstream.subscription_weight", v, "a path names a field, its parts split by dots: \"params\"")
            }
            config.upstream.subscriptionWeight = path
        }
        s.read("dedupe_window") { v in
            config.upstream.dedupeWindow = try self.int(v, "upstream.dedupe_window", in: 16...16_777_216, "a count of messages from 16 to 16777216")
        }
    }

    /// [upstream.limits]: the feed's rules for a connection (docs/limits.md).
    func limits(_ s: inout Section, _ config: inout Configuration) {
        s.read("messages_per_second") { v in
            let rate = v.double ?? v.int.map(Double.init)
            guard let rate, rate.isFinite, rate >= 0, rate <= 1_000_000 else {
                throw self.error("upstream.limits.messages_per_second", v, "must be a number of messages from 0 to 1000000 (0: unpaced), e.g. 5 or 0.5")
            }
            config.upstream.limits.messagesPerSecond = rate == 0 ? nil : rate
        }
        s.read("burst") { v in
            config.upstream.limits.burst = try self.int(v, "upstream.limits.burst", in: 1...100_000, "a count of messages from 1 to 100000")
        }
        s.read("count_pings") { v in config.upstream.limits.countPings = try self.bool(v, "upstream.limits.count_pings") }
        s.read("connect_attempts") { v in
            let text = try self.string(v, "upstream.limits.connect_attempts")
            guard !text.isEmpty else { return }
            let parts = text.split(separator: "/", omittingEmptySubsequences: false)
            let limit = parts.count == 2 ? Int(parts[0].trimmingSpaces()) : nil
            let seconds = parts.count == 2 ? Self.parseDuration(String(parts[1])) : nil
            guard let limit, (1...1_000_000).contains(limit), let seconds, seconds.isFinite, seconds > 0, seconds <= 86_400 * 7 else {
                throw self.error(
                    "upstream.limits.connect_attempts", v,
                    "must be ATTEMPTS/WINDOW: at most ATTEMPTS (1 to 1000000) connection attempts in any WINDOW (a duration up to 7 days), e.g. \"300/5m\"; empty: no limit"
                )
            }
            config.upstream.limits.connectAttempts = .init(limit: limit, window: .nanoseconds(Int64((seconds * 1e9).rounded())))
        }
    }
}
