import TOMLKit
import WSBridgeProtocol

/// The readers of every section but [upstream]: each asks its `Section` for the keys it
/// knows, which is what makes them known (ConfigurationLoader.swift).
extension ConfigurationReader {
    /// [protocol]: the settings of `upstream.protocol` (a key of another protocol is an error,
    /// checked once every section is read).
    func applicationProtocol(_ s: inout Section, _ config: inout Configuration) throws(ConfigurationError) {
        s.read("init_payload") { v in
            let text = try self.string(v, "protocol.init_payload")
            guard !text.isEmpty else { return }
            // JSON once its placeholders are filled (a token is a string's content).
            let sample = text.replacing("${token}", with: "t")
            guard (try? JSONValue.parse(sample)) != nil else {
                throw self.error("protocol.init_payload", v, "must be JSON text, e.g. '{\"token\":\"${token}\"}'")
            }
            do throws(PlaceholderError) {
                _ = try OpeningMessage(parsing: text)
            } catch {
                throw self.error("protocol.init_payload", v, error.description)
            }
            config.applicationProtocol.initPayload = text
        }
        // socketio, stomp, nats: strings (credentials may hold ${token}).
        let strings: [(String, WritableKeyPath<Configuration.ApplicationProtocol, String?>)] = [
            ("namespace", \.namespace), ("login", \.login), ("passcode", \.passcode), ("host", \.host), ("user", \.user), ("pass", \.pass),
            ("token", \.token), ("name", \.clientName),
        ]
        for (key, path) in strings {
            s.read(key) { v in
                let text = try self.string(v, "protocol.\(key)")
                do throws(PlaceholderError) {
                    _ = try OpeningMessage(parsing: text)
                } catch {
                    throw self.error("protocol.\(key)", v, error.description)
                }
                if key == "namespace", !text.hasPrefix("/") || text.contains(",") {
                    throw self.error("protocol.namespace", v, "a Socket.IO namespace starts with / and has no comma: \"/\" or \"/chat\"")
                }
                config.applicationProtocol[keyPath: path] = text
            }
        }
        s.read("auth") { v in
            let text = try self.string(v, "protocol.auth")
            guard (try? JSONValue.parse(text.replacing("${token}", with: "t"))) != nil else {
                throw self.error("protocol.auth", v, "must be JSON text, e.g. '{\"token\":\"${token}\"}'")
            }
            do throws(PlaceholderError) {
                _ = try OpeningMessage(parsing: text)
            } catch {
                throw self.error("protocol.auth", v, error.description)
            }
            config.applicationProtocol.auth = text
        }
        s.read("heart_beat") { v in
            let text = try self.string(v, "protocol.heart_beat")
            let parts = text.split(separator: ",", omittingEmptySubsequences: false).map { Int($0.trimmingSpaces()) }
            guard parts.count == 2, let send = parts[0], let receive = parts[1], send >= 0, receive >= 0 else {
                throw self.error(
                    "protocol.heart_beat", v,
                    "is two counts of milliseconds, \"SEND,RECEIVE\": how often the daemon can send a heart-beat and how often it wants one (0: never), e.g. \"10000,10000\""
                )
            }
            config.applicationProtocol.heartBeat = .init(send: send, receive: receive)
        }
        s.read("max_per_app") { v in
            config.applicationProtocol.maxPerApp = try self.int(v, "protocol.max_per_app", in: 1...1_000_000, "a count from 1 to 1000000")
        }
        s.read("max_total") { v in
            config.applicationProtocol.maxTotal = try self.int(v, "protocol.max_total", in: 1...10_000_000, "a count from 1 to 10000000")
        }
        s.read("max_subscription_bytes") { v in
            config.applicationProtocol.maxSubscriptionBytes = try self.int(
                v, "protocol.max_subscription_bytes", in: 1024...(1 << 30), "a size in bytes from 1024 to 1073741824")
        }
        s.read("set_aside_after") { v in
            config.applicationProtocol.setAsideAfter = try self.int(v, "protocol.set_aside_after", in: 0...1000, "a count from 0 (never) to 1000")
        }
        s.read("confirm_timeout") { v in config.applicationProtocol.confirmTimeout = try self.duration(v, "protocol.confirm_timeout") }
        s.read("id") { v in
            let path = try self.string(v, "protocol.id")
            guard !path.isEmpty, !JSONValue.PathComponent.split(path).contains(where: { $0.key.isEmpty }) else {
                throw self.error("protocol.id", v, "must be the id's path in the messages, dotted: \"id\" or \"params.id\"")
            }
            config.applicationProtocol.idPath = path
        }
        s.read("reply") { v in
            guard let items = v.array else {
                throw self.error("protocol.reply", v, "must be a list of tables: [[protocol.reply]] with when = \"ping\" and send = '{\"pong\":${msg:ping}}'")
            }
            config.applicationProtocol.replies = try items.map {
                (item: any TOMLValueConvertible) throws(ConfigurationError) -> Configuration.ApplicationProtocol.Reply in
                guard let table = item.table else {
                    throw self.error("protocol.reply", item, "each entry is a table: [[protocol.reply]] with when and send")
                }
                for key in table.keys where key != "when" && key != "send" {
                    throw self.error("protocol.reply.\(key)", table[key], "unknown key; a [[protocol.reply]] has when (a filter) and send (a template)")
                }
                guard let whenValue = table["when"], let sendValue = table["send"] else {
                    throw self.error("protocol.reply", item, "needs both when (a filter, as in tail --filter: \"ping\" or \"type=ping\") and send (JSON text)")
                }
                let when = Filter(parsing: try self.string(whenValue, "protocol.reply.when"))
                guard !when.field.isEmpty, !when.path.contains(where: { $0.key.isEmpty }) else {
                    throw self.error("protocol.reply.when", whenValue, "must be FIELD=VALUE or FIELD, as in tail --filter: \"ping\" or \"type=ping\"")
                }
                let text = try self.string(sendValue, "protocol.reply.send")
                do throws(ReplyTemplate.TemplateError) {
                    return .init(when: when, send: try ReplyTemplate(parsing: text))
                } catch {
                    throw self.error("protocol.reply.send", sendValue, error.description)
                }
            }
        }
    }

    /// [auth]: the token file.
    func auth(_ s: inout Section, _ config: inout Configuration) throws(ConfigurationError) {
        s.read("token_file") { v in
            config.auth.tokenFile = try self.path(v, "auth.token_file")

        }
    }

    /// [tls]: trust, the client certificate, the server name.
    func tls(_ s: inout Section, _ config: inout Configuration) throws(ConfigurationError) {
        s.read("ca_file") { v in config.tls.caFile = try self.path(v, "tls.ca_file") }
        s.read("cert_file") { v in config.tls.certFile = try self.path(v, "tls.cert_file") }
        s.read("key_file") { v in config.tls.keyFile = try self.path(v, "tls.key_file") }
        s.read("server_name") { v in
            let name = try self.string(v, "tls.server_name")
            config.tls.serverName = name.isEmpty ? nil : name
        }
        s.read("insecure") { v in config.tls.insecure = try self.bool(v, "tls.insecure") }
        if (config.tls.certFile == nil) != (config.tls.keyFile == nil) {
            let key = config.tls.certFile == nil ? "tls.cert_file" : "tls.key_file"
            throw self.error(key, nil, "tls.cert_file and tls.key_file go together: set both for mutual TLS, or neither")
        }

    }

    /// [proxy]: an HTTP CONNECT or SOCKS5 proxy.
    func proxy(_ s: inout Section, _ config: inout Configuration) throws(ConfigurationError) {
        s.read("url") { v in
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
        s.read("use_environment") { v in config.proxy.useEnvironment = try self.bool(v, "proxy.use_environment") }

    }

    /// [heartbeat]: the ping interval and pong deadline.
    func heartbeat(_ s: inout Section, _ config: inout Configuration) throws(ConfigurationError) {
        s.read("interval") { v in config.heartbeat.interval = try self.duration(v, "heartbeat.interval") }
        s.read("deadline") { v in config.heartbeat.deadline = try self.duration(v, "heartbeat.deadline") }
        s.read("text") { v in
            let s = try self.string(v, "heartbeat.text")
            config.heartbeat.text = s.isEmpty ? nil : s
        }

    }

    /// [backoff]: the reconnect delays.
    func backoff(_ s: inout Section, _ config: inout Configuration) throws(ConfigurationError) {
        s.read("base") { v in config.backoff.policy.base = try self.duration(v, "backoff.base") }
        s.read("cap") { v in config.backoff.policy.cap = try self.duration(v, "backoff.cap") }
        s.read("stable_after") { v in config.backoff.policy.stableAfter = try self.duration(v, "backoff.stable_after", allowZero: true) }
        s.read("max_attempts") { v in
            config.backoff.maxAttempts = try self.int(v, "backoff.max_attempts", in: 0...1_000_000, "a whole number, 0 for unlimited")
        }
        if config.backoff.policy.cap < config.backoff.policy.base {
            throw self.error("backoff.cap", s["cap"], "must be at least backoff.base (\(config.backoff.policy.base.short))")
        }

    }

    /// [reachability]: the network monitor.
    func reachability(_ s: inout Section, _ config: inout Configuration) throws(ConfigurationError) {
        s.read("enabled", reload: .restart) { v in config.reachability.enabled = try self.bool(v, "reachability.enabled") }
        s.read("poll_interval", reload: .restart) { v in config.reachability.pollInterval = try self.duration(v, "reachability.poll_interval") }

    }

    /// [local]: the socket and every bound a local client meets.
    func local(_ s: inout Section, _ config: inout Configuration) throws(ConfigurationError) {
        s.read("socket", reload: .restart) { v in
            guard let socket = try self.path(v, "local.socket") else {
                throw self.error("local.socket", v, "must not be empty: give the socket's absolute path")
            }
            config.local.socket = socket
        }
        s.read("mode", reload: .restart) { v in
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
        s.read("group", reload: .restart) { v in
            let s = try self.string(v, "local.group")
            config.local.group = s.isEmpty ? nil : s
        }
        s.read("max_line", reload: .restart) { v in
            config.local.maxLine = try self.int(v, "local.max_line", in: 1024...(1 << 30), "a byte count from 1024 to 1073741824")
        }
        s.read("subscriber_queue") { v in
            config.local.subscriberQueue = try self.int(v, "local.subscriber_queue", in: 1...10_000_000, "a message count from 1 to 10000000")
        }
        s.read("subscriber_queue_bytes") { v in
            config.local.subscriberQueueBytes = try self.int(v, "local.subscriber_queue_bytes", in: 1024...(1 << 34), "a byte count from 1024")
        }
        s.read("subscriber_queue_burst") { v in
            let burst = try self.duration(v, "local.subscriber_queue_burst", allowZero: true)
            guard burst <= .seconds(60) else {
                throw self.error("local.subscriber_queue_burst", v, "must be at most 60s (a burst, not a backlog: raise subscriber_queue for that), or 0 (off)")
            }
            config.local.subscriberQueueBurst = burst
        }
        s.read("replay") { v in
            config.local.replay = try self.int(v, "local.replay", in: 0...10_000_000, "a message count from 0 (off) to 10000000")
        }
        s.read("replay_bytes") { v in
            config.local.replayBytes = try self.int(v, "local.replay_bytes", in: 0...(1 << 34), "a byte count from 0 (off)")
        }
        s.read("inline_json") { v in config.local.inlineJSON = try self.bool(v, "local.inline_json") }
        s.read("max_clients") { v in
            config.local.maxClients = try self.int(v, "local.max_clients", in: 1...1_000_000, "a client count from 1 to 1000000")
        }
        s.read("reserved_clients") { v in
            let reserved = try self.int(v, "local.reserved_clients", in: 0...999_999, "a client count from 0 (none kept) to 999999")
            guard reserved < config.local.maxClients else {
                throw self.error(
                    "local.reserved_clients", v,
                    "must be below local.max_clients (\(config.local.maxClients)), or no other client could connect: lower it, or raise local.max_clients")
            }
            config.local.reservedClients = reserved
        }
        s.read("client_output_bytes") { v in
            config.local.clientOutputBytes = try self.int(v, "local.client_output_bytes", in: 4096...(1 << 30), "a byte count from 4096 to 1073741824")
        }
        s.read("send_buffer_bytes", reload: .restart) { v in
            let bytes = try self.int(v, "local.send_buffer_bytes", in: 0...(1 << 26), "a byte count from 0 (the system's default) to 67108864")
            guard bytes == 0 || bytes >= 4096 else {
                throw self.error("local.send_buffer_bytes", v, "must be 0 (the system's default) or at least 4096")
            }
            config.local.sendBufferBytes = bytes
        }
        s.read("lagging_send_buffer_bytes") { v in
            let bytes = try self.int(
                v, "local.lagging_send_buffer_bytes", in: 0...(1 << 26), "a byte count from 0 (none: it keeps send_buffer_bytes) to 67108864")
            guard bytes == 0 || bytes >= 4096 else {
                throw self.error("local.lagging_send_buffer_bytes", v, "must be 0 (none) or at least 4096")
            }
            config.local.laggingSendBufferBytes = bytes
        }
        s.read("max_pending_requests") { v in
            config.local.maxPendingRequests = try self.int(
                v, "local.max_pending_requests", in: 0...100_000, "a request count from 0 (no requests) to 100000")
        }
        s.read("max_pending_requests_total") { v in
            config.local.maxPendingRequestsTotal = try self.int(
                v, "local.max_pending_requests_total", in: 0...1_000_000, "a request count from 0 (no requests) to 1000000")
        }
        s.read("filter_max_bytes") { v in
            config.local.filterMaxBytes = try self.int(v, "local.filter_max_bytes", in: 1...65536, "a byte count from 1 to 65536")
        }
        s.read("filter_max_depth") { v in
            config.local.filterMaxDepth = try self.int(v, "local.filter_max_depth", in: 1...1024, "a component count from 1 to 1024")
        }
        s.read("sticky_keys_per_client") { v in
            config.local.stickyKeysPerClient = try self.int(
                v, "local.sticky_keys_per_client", in: 0...100_000, "a key count from 0 (no sticky sends) to 100000")
        }
        s.read("sticky_keys") { v in
            config.local.stickyKeys = try self.int(v, "local.sticky_keys", in: 0...1_000_000, "a key count from 0 (no sticky sends) to 1000000")
        }
        s.read("sticky_bytes") { v in
            config.local.stickyBytes = try self.int(v, "local.sticky_bytes", in: 0...(1 << 30), "a byte count from 0 to 1073741824")
        }
        s.table("websocket", reader: self) { s in self.webSocketFace(&s, &config) }

    }

    /// [access]: who may send.
    func access(_ s: inout Section, _ config: inout Configuration) throws(ConfigurationError) {
        s.read("write_uids") { v in
            guard let array = v.array else { throw self.error("access.write_uids", v, "must be an array of user ids, e.g. [1000, 1001]") }
            config.access.writeUIDs = try array.map { (item: any TOMLValueConvertible) throws(ConfigurationError) -> UInt32 in
                UInt32(try self.int(item, "access.write_uids", in: 0...Int(UInt32.max - 1), "a numeric user id"))
            }
        }
        s.read("write_groups") { v in
            guard let array = v.array else { throw self.error("access.write_groups", v, "must be an array of group names, e.g. [\"wsbridge\"]") }
            config.access.writeGroups = try array.map { (item: any TOMLValueConvertible) throws(ConfigurationError) -> String in
                try self.string(item, "access.write_groups")
            }
        }

    }

    /// [log]: the level.
    func logging(_ s: inout Section, _ config: inout Configuration) throws(ConfigurationError) {
        s.read("level") { v in
            let s = try self.string(v, "log.level")
            guard let level = Configuration.LogLevel(rawValue: s.lowercased()) else {
                throw self.error("log.level", v, "one of \(Configuration.LogLevel.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            config.log.level = level

        }
    }

    /// [metrics]: the Prometheus endpoint.
    func metrics(_ s: inout Section, _ config: inout Configuration) throws(ConfigurationError) {
        s.read("listen") { v in
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
        s.read("max_connections") { v in
            config.metrics.maxConnections = try self.int(v, "metrics.max_connections", in: 1...1024, "a whole number from 1 to 1024")
        }

    }
}
