import ArgumentParser
import WSBridgeProtocol

#if canImport(Glibc)
import Glibc
#endif

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show the link's state, counters and subscribers.")

    @OptionGroup var global: GlobalOptions

    func run() throws {
        let result = try self.global.run("status")
        if self.global.json {
            Output.line(result.serialized)
            return
        }
        Output.line(Self.table(result))
    }

    static func table(_ s: JSONValue) -> String {
        func n(_ key: String) -> Int { s[key]?.intValue ?? 0 }
        var rows: [(String, String)] = []
        let state = s["state"]?.stringValue ?? "?"
        var since = ""
        if let ms = s["since"]?.doubleValue {
            since = " since \(Self.time(ms)) (\(Self.ago(ms)))"
        }
        rows.append(("state", state + since))
        rows.append(("upstream", s["url"]?.stringValue ?? "?"))
        if let retry = s["retry_in_ms"]?.doubleValue { rows.append(("next attempt", "in \(Self.duration(retry))")) }
        if let rtt = s["rtt_ms"]?.doubleValue { rows.append(("rtt", "\(rtt) ms")) }
        if let p = s["subprotocol"]?.stringValue { rows.append(("subprotocol", p)) }
        rows.append(("compression", s["compression"] == true ? "permessage-deflate" : "off"))
        rows.append(("reconnects", "\(n("reconnects"))"))
        if n("failed_attempts") > 0 { rows.append(("failed attempts", "\(n("failed_attempts"))")) }
        if let close = s["last_close"], close != .null {
            let code = close["code"]?.intValue.map(String.init) ?? "-"
            let reason = close["reason"]?.stringValue ?? ""
            rows.append(("last close", "by \(close["by"]?.stringValue ?? "?"), code \(code)\(reason.isEmpty ? "" : ": \(reason)")"))
        }
        if let e = s["last_error"]?.stringValue { rows.append(("last error", e)) }
        rows.append(("messages in", "\(n("messages_in")) (\(Self.bytes(n("bytes_in"))))"))
        rows.append(("messages out", "\(n("messages_out")) (\(Self.bytes(n("bytes_out"))))"))
        let q = s["queue"]
        rows.append(("send queue", "\(q?["messages"]?.intValue ?? 0)/\(q?["max_messages"]?.intValue ?? 0) messages, \(Self.bytes(q?["bytes"]?.intValue ?? 0))"))
        rows.append(("subscribers", "\(n("subscribers")) (\(n("clients")) clients)"))
        rows.append(("dropped", "\(n("drops")) messages (slow subscribers)"))
        rows.append(("last seq", "\(n("seq"))"))
        let width = rows.map(\.0.count).max() ?? 0
        return rows.map { $0.0 + String(repeating: " ", count: width - $0.0.count + 2) + $0.1 }.joined(separator: "\n")
    }

    static func bytes(_ n: Int) -> String {
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
