import ArgumentParser
import WSBridgeProtocol

#if canImport(Glibc)
    import Glibc
#endif

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show the link's state, counters and subscribers.",
        discussion: "A field this wsbridgectl has no row for (one a newer wsbridged reports) is shown as it is, its name in words.")

    @OptionGroup var global: GlobalOptions

    func run() throws {
        try self.global.show(.status, readable: Self.table)
    }

    static func table(_ json: JSONValue) throws -> String {
        let s = try StatusReport(json: json)
        var rows = Rows()
        var culpritRow: String?
        rows.add("state", "\(s.state.readable) since \(Self.time(Double(s.since))) (\(Self.ago(Double(s.since))))", words: "state", "since")
        rows.add("upstream", s.url, words: "url")
        rows.add("next attempt", s.retryInMs.map { "in \(Self.duration(Double($0)))" }, words: "retry_in_ms")
        rows.add(
            "rtt",
            s.rttMs.map { "\(($0 * 10).rounded() / 10) ms" }
                ?? (s.state == .open ? "not measured yet on this link (at the next heartbeat)" : "none (the link is not open)"), words: "rtt_ms")
        rows.add("subprotocol", s.subprotocol, words: "subprotocol")
        rows.add("compression", s.compression ? "permessage-deflate" : "off", words: "compression")
        rows.add("reconnects", "\(s.reconnects)", words: "reconnects")
        rows.add("failed attempts", s.failedAttempts > 0 ? "\(s.failedAttempts)" : nil, words: "failed_attempts")
        rows.add("last close", s.lastClose.map(Self.closeText), words: "last_close")
        // last_error_reason is for scripts: last_error says it in words.
        rows.add("last error", s.lastError, words: "last_error", "last_error_reason")
        var session: String?
        if let se = s.session, se.openingMessages > 0 || se.readyWhen != nil || se.stickyKeys > 0 {
            var parts: [String] = []
            if se.openingMessages > 0 { parts.append("\(se.openingMessages) opening message\(se.openingMessages == 1 ? "" : "s")") }
            if let culprit = se.culprit, s.protocol?.culprit == nil { culpritRow = culprit }
            if let gate = se.readyWhen { parts.append("ready when \(gate) (\(se.ready))") }
            parts.append("\(se.stickyKeys) sticky key\(se.stickyKeys == 1 ? "" : "s") (\(Self.bytes(UInt64(se.stickyBytes))))")
            session = parts.joined(separator: ", ")
        }
        rows.add("session", session, words: "session")
        rows.add("messages in", "\(s.traffic.messagesIn) (\(Self.bytes(s.traffic.bytesIn)))", words: "messages_in", "bytes_in")
        rows.add("messages out", "\(s.traffic.messagesOut) (\(Self.bytes(s.traffic.bytesOut)))", words: "messages_out", "bytes_out")
        rows.add("send queue", "\(s.queue.messages)/\(s.queue.maxMessages) messages, \(Self.bytes(UInt64(s.queue.bytes)))", words: "queue")
        rows.add("limits", s.limits.map(Self.limitsText), words: "limits")
        rows.add("renewal", s.renewal.map(Self.renewalText), words: "renewal")
        rows.add(words: "connections")
        for c in s.connections ?? [] {
            rows.add("connection \(c.connection)", Self.connectionText(c))
        }
        rows.add(
            "spool",
            s.queue.spool.map { spool in
                "\(spool.directory) (fsync \(spool.fsync)), \(Self.bytes(UInt64(spool.fileBytes))), \(spool.fsyncs) fdatasync\(spool.fsyncs == 1 ? "" : "s")"
            })
        rows.add(
            "journal",
            s.journal.map { j in
                let kept = j.oldestSeq.map { "seq \($0)...\(j.newestSeq ?? $0)" } ?? "no message yet"
                let state =
                    j.stoppedReason.map { "STOPPED: \($0)" } ?? "\(kept), \(Self.bytes(UInt64(j.bytes))) in \(j.segments) segment\(j.segments == 1 ? "" : "s")"
                return "\(j.dir): \(state) (wsbridgectl journal)"
            }, words: "journal")
        rows.add(
            "fleet",
            s.fleet.map { f in
                var text =
                    f.role == "follower"
                    ? "follower, \(f.state): stream \(f.stream), subject \(f.subject); \(f.received ?? 0) received, last stream seq \(f.streamSeq ?? 0), \(f.forwarded ?? 0) send(s) through the bridge"
                    : "\(f.state): stream \(f.stream), subject \(f.subject); \(f.acknowledged) acknowledged, lag \(f.lag)"
                if f.lost > 0 { text += ", \(f.lost) LOST" }
                if let apps = f.followerApps { text += ", \(apps) followers' app(s) on its protocol layer" }
                if let lease = f.lease { text += "; lease: \(lease)" }
                if let error = f.lastError { text += "; last error: \(error)" }
                return text
            }, words: "fleet")
        rows.add("culprit", culpritRow)
        if let p = s.protocol {
            let holders = p.subscriptions.reduce(0) { $0 + $1.holders.count }
            rows.add(
                "protocol", "\(p.name): \(p.subscriptions.count) live subscription\(p.subscriptions.count == 1 ? "" : "s") upstream, \(holders) held by apps",
                words: "protocol")
            let aside = p.subscriptions.filter { $0.setAside != nil }.count
            rows.add("set aside", aside > 0 ? "\(aside) subscription\(aside == 1 ? "" : "s") (wsbridgectl subscriptions; --clear sends again)" : nil)
            rows.add("culprit", p.culprit)
            rows.add("server error", p.serverError)
        }
        var clients = "\(s.clients) connected, \(s.subscribers) subscribed"
        if s.refusedClients > 0 { clients += ", \(s.refusedClients) refused (local.max_clients)" }
        rows.add("clients", clients, words: "clients", "subscribers", "refused_clients")
        rows.add("NOT ACCEPTING", s.notAccepting, words: "not_accepting")
        rows.add("dropped", "\(s.drops) messages (slow subscribers)", words: "drops")
        rows.add("last seq", "\(s.seq) (stream \(s.stream))", words: "seq", "stream")
        rows.add("last reload", s.service.lastReload.map(Self.reloadText), words: "last_reload")
        rows.add("metrics", s.service.metricsUrl, words: "metrics_url")
        // The last row, below what this table has no row for (a newer daemon's fields), shown as
        // it is.
        let version = s.commit.map { "\(s.version) (commit \($0))" } ?? s.version
        rows.add(words: "version", "commit")
        if case .object(let fields) = json {
            for (key, value) in fields where !rows.worded.contains(key) && value != .null {
                rows.add(String(key.map { $0 == "_" ? " " : $0 }), Self.plain(value))
            }
        }
        rows.add("version", version)
        // One width for every call, whichever optional rows this one has (a longer label widens it).
        let width = max(Self.labelWidth, rows.lines.map(\.0.count).max() ?? 0)
        return rows.lines.map { $0.0 + String(repeating: " ", count: width - $0.0.count + 2) + $0.1 }.joined(separator: "\n")
    }

    /// `[upstream.limits]` in words: "5/s (burst 1, pings count): 3 waiting for 1.2s, 40 paced;
    /// connect attempts 2 of 3/10s, the next in 4.1s".
    static func limitsText(_ l: StatusReport.Limits) -> String {
        var parts: [String] = []
        if let rate = l.messagesPerSecond {
            var pace = "\(Self.number(rate))/s (burst \(l.burst ?? 1)\(l.countPings ? ", pings count" : ""))"
            if let wait = l.waitMs {
                pace += ": \(l.waiting) of the daemon's own waiting, for \(Self.millis(wait))"
            }
            parts.append(pace + ", \(l.paced) paced")
        }
        if let attempts = l.connectAttempts {
            var text = "connect attempts \(l.attemptsInWindow ?? 0) of \(attempts)"
            if let wait = l.connectWaitMs { text += ", the next in \(Self.millis(wait))" }
            parts.append(text)
        }
        return parts.joined(separator: "; ")
    }

    static func connectionText(_ c: StatusReport.Connection) -> String {
        var text = "\(c.state.rawValue), \(c.subscriptions) subscriptions (\(c.keys) keys), \(c.messagesIn) in, \(c.messagesOut) out"
        if let rtt = c.rttMs { text += ", rtt \(Self.number((rtt * 10).rounded() / 10))ms" }
        if c.reconnects > 0 { text += ", \(c.reconnects) reconnects" }
        if c.renewals > 0 { text += ", \(c.renewals) renewals" }
        if c.waiting > 0 { text += ", \(c.waiting) waiting for the pace" }
        if let culprit = c.culprit { text += "; closed right after open: \(culprit)" }
        return text
    }

    static func renewalText(_ r: StatusReport.Renewal) -> String {
        var parts = ["\(r.renewals) renewed, \(r.failed) failed, \(r.duplicatesDropped) duplicates dropped"]
        if let underway = r.underway {
            parts.append(underway == "opening" ? "a new connection is opening" : "the old connection is closing")
        } else if let next = r.inMs {
            parts.append("the next in \(Self.millis(next))")
        }
        if let last = r.last {
            let how = last.failure.map { "failed: \($0)" } ?? "overlap \(Self.millis(last.overlapMs ?? 0))"
            parts.append("last: \(last.why), \(how)")
        }
        return parts.joined(separator: "; ")
    }

    private static func number(_ value: Double) -> String {
        value == value.rounded() ? "\(Int(value))" : "\(value)"
    }

    private static func millis(_ ms: Int64) -> String {
        ms < 1000 ? "\(ms)ms" : "\(Double(ms / 100) / 10)s"
    }

    /// The table's rows, and the status keys they word.
    struct Rows {
        private(set) var lines: [(String, String)] = []
        private(set) var worded: Set<String> = []

        /// A row, when `value` is not nil; `keys` are the status fields it words (shown or not).
        mutating func add(_ label: String = "", _ value: String? = nil, words keys: String...) {
            self.worded.formUnion(keys)
            if let value { self.lines.append((label, value)) }
        }
    }

    /// A value as it is: a string without quotes, anything else as JSON.
    static func plain(_ value: JSONValue) -> String {
        if case .string(let text) = value { return text }
        return value.serialized
    }

    /// The widest label ("failed attempts", "server error"): the values start after it.
    static let labelWidth = 15

    /// `by the server, code 1000: bye`; `link lost: connection reset` (no close frame: no code).
    static func closeText(_ close: StatusReport.Close) -> String {
        let detail = close.reason.isEmpty ? "" : ": \(close.reason)"
        let code = close.code.map { ", code \($0)" } ?? ""
        switch close.by {
        case .user where close.reason == StatusReport.Close.reconnectReason: return "by an operator (wsbridgectl reconnect)\(code)"
        case .user: return "by an operator (wsbridgectl close)\(code)\(detail)"
        case .server: return "by the server\(code)\(detail)"
        case .daemon: return "by the daemon stopping\(code)\(detail)"
        case .error: return "link lost\(code)\(detail)"
        default: return "by \(close.by)\(code)\(detail)"  // a closer a newer daemon added
        }
    }

    /// `applied 5 s ago; restart needed for local.max_line`; `FAILED 5 s ago, the running
    /// configuration kept: heartbeat.interval = "soon" ...`.
    static func reloadText(_ reload: StatusReport.Reload) -> String {
        var parts = [
            reload.error.map { "FAILED \(Self.ago(Double(reload.at))), the running configuration kept: \($0)" } ?? "applied \(Self.ago(Double(reload.at)))"
        ]
        if !reload.restartNeeded.isEmpty { parts.append("restart needed for \(reload.restartNeeded.joined(separator: ", "))") }
        if !reload.nextConnection.isEmpty { parts.append("from the next connection: \(reload.nextConnection.joined(separator: ", "))") }
        return parts.joined(separator: "; ")
    }

    static func bytes(_ n: UInt64) -> String {
        if n < 1024 { return "\(n) B" }
        if n < 1 << 20 { return "\((Double(n) / 1024 * 10).rounded() / 10) KiB" }
        if n < 1 << 30 { return "\((Double(n) / 1_048_576 * 10).rounded() / 10) MiB" }
        return "\((Double(n) / 1_073_741_824 * 10).rounded() / 10) GiB"
    }

    static func duration(_ ms: Double) -> String {
        let s = ms / 1000
        if s < 1 { return "\(Int(ms)) ms" }
        if s < 120 { return "\((s * 10).rounded() / 10) s" }
        if s < 7200 { return "\(Int(s / 60)) min" }
        return "\(Int(s / 3600)) h"
    }

    static func ago(_ ms: Double) -> String {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        let now = Double(ts.tv_sec) * 1000 + Double(ts.tv_nsec) / 1e6
        return "\(Self.duration(max(0, now - ms))) ago"
    }

    static func time(_ ms: Double) -> String {
        var seconds = time_t(ms / 1000)
        var tm = tm()
        localtime_r(&seconds, &tm)
        var buffer = [CChar](repeating: 0, count: 64)
        let n = strftime(&buffer, buffer.count, "%Y-%m-%d %H:%M:%S", &tm)
        return String(decoding: buffer.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
