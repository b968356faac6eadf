import Foundation
import Glibc
import Testing
import WSBridgeDaemon
import WSBridgeProtocol

/// The metrics: `wsbridgectl metrics` (the socket op) and the HTTP endpoint, fetched with curl
/// and parsed by prometheus_client's parser (Tests/peers/prom_parse.py), against a real daemon.
@Suite struct MetricsTests {
    struct Parsed {
        var families: [String: String]
        var samples: [String: Double]

        subscript(_ key: String) -> Double? { self.samples[key] }
    }

    /// Parses with the reference parser; fails the test on text it rejects.
    static func parse(_ text: String) throws -> Parsed {
        let r = try spawnAndWait(Paths.python, ["\(Paths.root)/Tests/peers/prom_parse.py"], stdin: text)
        guard r.status == 0, let json = try? JSONValue.parse(r.stdout) else {
            throw TestFailure("prometheus_client rejected the text: \(r.stderr)\n\(text)")
        }
        var families: [String: String] = [:]
        if case .object(let f)? = json["families"] {
            for (name, type) in f { families[name] = type.stringValue }
        }
        var samples: [String: Double] = [:]
        if case .object(let s)? = json["samples"] {
            for (key, value) in s {
                if case .number(let n) = value { samples[key] = Double(n.text) }
            }
        }
        return Parsed(families: families, samples: samples)
    }

    static func ctl(_ arguments: [String], socket: String) throws -> (status: Int32, out: String, err: String) {
        let r = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", socket] + arguments)
        return (r.status, r.stdout, r.stderr)
    }

    static func metrics(_ socket: String) throws -> Parsed {
        let r = try Self.ctl(["metrics"], socket: socket)
        guard r.status == 0 else { throw TestFailure("wsbridgectl metrics exited \(r.status): \(r.err)") }
        return try Self.parse(r.out)
    }

    /// `curl -s -i`: the status line, the headers and the body.
    static func curl(_ arguments: [String]) throws -> (status: Int32, head: String, body: String) {
        let r = try spawnAndWait("/usr/bin/curl", ["-s", "-i", "--max-time", "20"] + arguments)
        let parts = r.stdout.components(separatedBy: "\r\n\r\n")
        return (r.status, parts.first ?? "", parts.dropFirst().joined(separator: "\r\n\r\n"))
    }

    /// The metrics once the daemon has sent an event that `matches` (from `mark` on): the
    /// event a value follows, awaited rather than polled.
    static func after(_ f: DaemonFixture, from mark: Int = 0, _ matches: @escaping @Sendable (String) -> Bool) async throws -> Parsed {
        #expect(await f.daemon.awaitEvent(from: mark, matches), "no such event: \(f.daemon.events?.messages.text ?? "")")
        return try Self.metrics(f.socket)
    }

    /// The metrics once `check` holds of them: for a count no event announces.
    static func when(_ f: DaemonFixture, _ what: String, _ check: (Parsed) -> Bool) async throws -> Parsed {
        try await eventually(what, { try Self.metrics(f.socket) }, until: check)
    }

    /// The port the endpoint bound (`listen = "127.0.0.1:0"`), as status says once the daemon is ready.
    static func httpPort(_ f: DaemonFixture) async throws -> Int {
        #expect(await f.daemon.awaitReady())
        let url = try daemonStatus(f.socket).service.metricsUrl ?? ""
        let prefix = "http://127.0.0.1:"
        guard url.hasPrefix(prefix), url.hasSuffix("/metrics"), let port = Int(url.dropFirst(prefix.count).prefix(while: \.isNumber)) else {
            throw TestFailure("status names no metrics endpoint: \"\(url)\"")
        }
        return port
    }

    @Test func theSocketOpAndTheHTTPEndpointServeEveryFamilyParsably() async throws {
        let f = try await DaemonFixture(
            extraConfig: """
                [heartbeat]
                interval = "200ms"
                [metrics]
                listen = "127.0.0.1:0"
                """
        )
        let subscriber = try await f.client()
        #expect(try Self.ctl(["send", "one"], socket: f.socket).out == "sent\n")
        #expect(await f.server.event("message one") != nil)
        f.server.command("burst 25 100")
        #expect(await subscriber.lines.wait(containing: "\"seq\":25,") != nil)

        // A heartbeat answered: the round-trip histogram has a sample.
        let m = try await Self.after(f) { $0.hasPrefix("STATUS=open ") && $0.contains(", rtt ") }
        #expect((m["wsbridge_heartbeat_rtt_seconds_count{}"] ?? 0) >= 1)
        for family in MetricFamily.allCases {
            // prometheus_client names a counter family without its _total suffix.
            let name = family.type == .counter ? String(family.name.dropLast("_total".count)) : family.name
            #expect(m.families[name] == family.type.rawValue, "family \(family.name) missing or mistyped: \(m.families)")
        }
        let status = try StatusReport(json: try JSONValue.parse(try Self.ctl(["status", "--json"], socket: f.socket).out))
        #expect(m["wsbridge_upstream_messages_total{direction=in}"] == Double(status.traffic.messagesIn))
        #expect(m["wsbridge_upstream_messages_total{direction=in}"].map { $0 >= 25 } == true)
        #expect(m["wsbridge_upstream_bytes_total{direction=in}"] == Double(status.traffic.bytesIn))
        #expect(m["wsbridge_upstream_messages_total{direction=out}"] == 1)
        #expect(m["wsbridge_upstream_bytes_total{direction=out}"] == 3)
        #expect(m["wsbridge_link_state{state=open}"] == 1)
        for phase in ["idle", "connecting", "closing", "waitingForNetwork", "backingOff", "stopped"] {
            #expect(m["wsbridge_link_state{state=\(phase)}"] == 0)
        }
        #expect(m["wsbridge_subscribers{}"] == 1)
        // The subscriber; the wsbridgectl asking does not count.
        #expect(m["wsbridge_clients{}"] == 1)
        #expect(m["wsbridge_last_seq{}"] == Double(status.seq))
        #expect(m["wsbridge_connect_failures_total{reason=error}"] == 0)
        #expect(m["wsbridge_outbound_queue_messages{}"] == 0)
        #expect((m["wsbridge_link_state_seconds{}"] ?? -1) >= 0)

        // Which build runs, and the process collector, against what /proc says of the daemon.
        #expect(m["wsbridge_build_info{commit=\(WSBridgeVersion.commit ?? ""),version=\(WSBridgeVersion.current)}"] == 1, "\(m.samples.keys.sorted())")
        let pid = f.daemon.pid
        let fds = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count
        // The scrape's own socket may come and go: within a few of the count now.
        #expect(abs((m["process_open_fds{}"] ?? 0) - Double(fds)) <= 4, "\(m["process_open_fds{}"] ?? -1) vs \(fds)")
        #expect((m["process_max_fds{}"] ?? 0) >= 1024)
        let rss = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8).split(separator: "\n")
            .first { $0.hasPrefix("VmRSS:") }.flatMap { Double($0.split(separator: " ", omittingEmptySubsequences: true)[1]) }.map { $0 * 1024 }
        #expect(rss != nil && (m["process_resident_memory_bytes{}"] ?? 0) > (rss ?? 0) / 2 && (m["process_resident_memory_bytes{}"] ?? 0) < (rss ?? 0) * 2)
        #expect((m["process_virtual_memory_bytes{}"] ?? 0) >= (m["process_resident_memory_bytes{}"] ?? 1))
        #expect((m["process_cpu_seconds_total{}"] ?? -1) > 0)
        let started = m["process_start_time_seconds{}"] ?? 0
        #expect(abs(started - Date().timeIntervalSince1970) < 600, "start time \(started)")

        // The same registry over HTTP, with the format's content type.
        let port = try await Self.httpPort(f)
        let http = try Self.curl(["http://127.0.0.1:\(port)/metrics"])
        #expect(http.status == 0 && http.head.hasPrefix("HTTP/1.1 200"), "\(http.head)")
        #expect(http.head.lowercased().contains("content-type: text/plain; version=0.0.4; charset=utf-8"))
        let overHTTP = try Self.parse(http.body)
        #expect(overHTTP.families == m.families)
        #expect(overHTTP["wsbridge_upstream_messages_total{direction=out}"] == 1)
        // A query string is fine (some scrapers add one); HEAD has no body.
        #expect(try Self.curl(["http://127.0.0.1:\(port)/metrics?x=1"]).head.hasPrefix("HTTP/1.1 200"))
        let head = try Self.curl(["-I", "http://127.0.0.1:\(port)/metrics"])
        #expect(head.head.hasPrefix("HTTP/1.1 200") && head.body.isEmpty)

        // Anything else says what is served.
        let missing = try Self.curl(["http://127.0.0.1:\(port)/"])
        #expect(missing.head.hasPrefix("HTTP/1.1 404") && missing.body.contains("/metrics"), "\(missing)")
        let post = try Self.curl(["-X", "POST", "--data", "x", "http://127.0.0.1:\(port)/metrics"])
        #expect(post.head.hasPrefix("HTTP/1.1 405") && post.head.contains("Allow: GET, HEAD"), "\(post)")
        // And the daemon serves on.
        #expect(try Self.curl(["http://127.0.0.1:\(port)/metrics"]).head.hasPrefix("HTTP/1.1 200"))
    }

    @Test func reconnectsFailuresAndDropsAreCountedByReason() async throws {
        let f = try await DaemonFixture(
            extraConfig: """
                subscriber_queue = 2
                subscriber_queue_burst = 0
                send_buffer_bytes = 4096
                [queue]
                max_messages = 1
                """
        )
        // Lost without a close frame, two refused attempts, then open again.
        f.server.command("refuse on")
        f.server.command("drop")
        // Two failures (no event tells each attempt: the metric is the state to read).
        var m = try await Self.when(f, "two connect failures") { ($0["wsbridge_connect_failures_total{reason=error}"] ?? 0) >= 2 }
        f.server.command("refuse off")
        try await awaitStatus(f.socket, "open again") { $0.state == .open && $0.reconnects == 1 }
        m = try Self.metrics(f.socket)
        #expect(m["wsbridge_reconnects_total{reason=error}"] == 1)
        #expect(m["wsbridge_link_state{state=open}"] == 1)
        // Closed by the server with a close frame.
        f.server.command("close 1001 going away")
        try await awaitStatus(f.socket, "open again") { $0.state == .open && $0.reconnects == 2 }
        m = try Self.metrics(f.socket)
        #expect(m["wsbridge_reconnects_total{reason=server_closed}"] == 1)
        #expect(m["wsbridge_reconnects_total{reason=error}"] == 1)

        // A subscriber that reads nothing: its queue of 2 overflows.
        let stalled = try await f.client(reading: false, name: "stalled")
        _ = stalled
        // A reader sees the last message fanned out (its own queue may drop older ones).
        let watcher = try await f.client(name: "watcher")
        f.server.command("flood 2000 1000")
        #expect(await f.server.event("flood done") != nil)
        // Every message fanned out (2,000 and the end marker): no drop can follow.
        #expect(await watcher.lines.wait(containing: "\"seq\":2001,") != nil)
        m = try Self.metrics(f.socket)
        #expect(m["wsbridge_last_seq{}"] == 2001)
        #expect((m["wsbridge_dropped_messages_total{reason=subscriber_queue_full}"] ?? 0) > 0)
        let status = try StatusReport(json: try JSONValue.parse(try Self.ctl(["status", "--json"], socket: f.socket).out))
        #expect(m["wsbridge_dropped_messages_total{reason=subscriber_queue_full}"] == Double(status.drops))

        // The link closed by the user: one send waits in the queue of 1, the next is refused.
        #expect(try Self.ctl(["close"], socket: f.socket).status == 0)
        #expect(try Self.ctl(["send", "queued"], socket: f.socket).status == 0)
        #expect(try Self.ctl(["send", "refused"], socket: f.socket).status != 0)
        m = try Self.metrics(f.socket)
        #expect(m["wsbridge_dropped_messages_total{reason=outbound_queue_full}"] == 1)
        #expect(m["wsbridge_outbound_queue_messages{}"] == 1)
        #expect(m["wsbridge_outbound_queue_bytes{}"] == 6)
        #expect(m["wsbridge_link_state{state=idle}"] == 1)
    }

    @Test func theEndpointTakesAtMostMaxConnections() async throws {
        let f = try await DaemonFixture(
            extraConfig: """
                [metrics]
                listen = "127.0.0.1:0"
                max_connections = 1
                """
        )
        let port = try await Self.httpPort(f)
        // One idle connection holds the only place...
        let holder = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        // Closed once: a second close(2) would close whatever descriptor took the number since.
        var holderOpen = true
        defer { if holderOpen { close(holder) } }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(holder, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        #expect(connected == 0)
        // ...so the next is closed without an answer (curl: empty reply, exit 52).
        // The holder may not have been accepted yet: try until it has.
        let refused = try await eventually("a scrape refused", { try Self.curl(["http://127.0.0.1:\(port)/metrics"]) }, until: { $0.status != 0 })
        // 52: an empty reply; 56: reset while reading. Either way no answer.
        #expect(refused.status == 52 || refused.status == 56, "\(refused)")
        close(holder)
        holderOpen = false
        let served = try await eventually("a scrape served", { try Self.curl(["http://127.0.0.1:\(port)/metrics"]) }, until: { $0.status == 0 })
        #expect(served.head.hasPrefix("HTTP/1.1 200"))
    }

    /// The example alert rules load, and their unit tests pass, in Prometheus' own tool.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/promtool"), "needs promtool (Debian's prometheus; scripts/setup)"))
    func theAlertRulesPassPromtool() throws {
        let check = try spawnAndWait("/usr/bin/promtool", ["check", "rules", "\(Paths.root)/etc/wsbridge-alerts.yml"])
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
        #expect(check.stdout.contains("SUCCESS: 7 rules found"), "\(check.stdout)")
        let test = try spawnAndWait("/usr/bin/promtool", ["test", "rules", "\(Paths.root)/etc/wsbridge-alerts.test.yml"])
        #expect(test.status == 0, "\(test.stdout)\(test.stderr)")
        // Every metric the rules name is one the daemon exports.
        let rules = try String(contentsOfFile: "\(Paths.root)/etc/wsbridge-alerts.yml", encoding: .utf8)
        let names = Set(MetricFamily.allCases.map(\.name) + ["wsbridge_heartbeat_rtt_seconds_bucket"])
        let used = rules.split(whereSeparator: { !($0.isLetter || $0.isNumber || $0 == "_") }).map(String.init)
            .filter { $0.hasPrefix("wsbridge_") || $0.hasPrefix("process_") }
        #expect(!used.isEmpty)
        for name in used { #expect(names.contains(name), "the rules use \(name), which the daemon does not export") }
    }

    @Test func everyFamilyIsDocumented() throws {
        let docs = try String(contentsOfFile: "\(Paths.root)/docs/metrics.md", encoding: .utf8)
        let rows = docs.split(separator: "\n").filter { $0.hasPrefix("| `wsbridge_") || $0.hasPrefix("| `process_") }
        #expect(rows.count == MetricFamily.allCases.count, "docs/metrics.md has a row for a family the daemon does not export")
        for family in MetricFamily.allCases {
            let row = rows.first { $0.hasPrefix("| `\(family.name)` | \(family.type.rawValue) |") }
            #expect(row != nil, "docs/metrics.md does not describe \(family.name) as a \(family.type.rawValue)")
            for label in family.labels {
                #expect(row?.contains("`\(label.name)`") == true, "docs/metrics.md: \(family.name) does not name its label \(label.name)")
            }
        }
    }

    @Test func aBadListenAddressIsAConfigurationErrorThatSaysWhatIsAccepted() throws {
        let dir = try TemporaryDirectory()
        let config = try dir.write("bad.toml", "[metrics]\nlisten = \"9464\"\n")
        let r = try spawnDaemonAndWait(["--check-config", "--config", config])
        #expect(r.status != 0)
        #expect(r.stderr.contains("metrics.listen") && r.stderr.contains("127.0.0.1:9464"), "\(r.stderr)")
    }
}
