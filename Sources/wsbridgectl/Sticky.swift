import ArgumentParser
import WSBridgeProtocol

struct Sticky: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the sticky sends: what goes upstream again after every reconnect.",
        discussion: "Keys in the order they are sent after the opening messages, with their scope, holders (pid, uid) and age."
    )

    @OptionGroup var global: GlobalOptions

    func run() throws {
        try self.global.show(.sticky, readable: Self.table)
    }

    static func table(_ json: JSONValue) throws -> String {
        let list = try StickyListResult(json: json)
        guard !list.keys.isEmpty else { return "no sticky keys" }
        var rows: [[String]] = [["KEY", "SCOPE", "HOLDERS", "AGE", "BYTES", "TEXT"]]
        for k in list.keys {
            let scopes = Set(k.holders.map(\.scope.rawValue)).sorted().joined(separator: "+")
            let holders = k.holders.map { h in
                h.scope == .daemon
                    ? "daemon (pid \(h.pid.map(String.init) ?? "?"))" : "pid \(h.pid.map(String.init) ?? "?") uid \(h.uid.map(String.init) ?? "?")"
            }.joined(separator: ", ")
            rows.append([k.key, scopes, holders, String(Status.ago(Double(k.since)).dropLast(" ago".count)), "\(k.bytes)", k.preview])
        }
        let widths = (0..<5).map { i in rows.map { $0[i].count }.max() ?? 0 }
        return rows.map { row in
            (0..<5).map { i in row[i] + String(repeating: " ", count: widths[i] - row[i].count + 2) }.joined() + row[5]
        }.joined(separator: "\n")
    }
}

struct Unstick: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Release a sticky key; when nobody holds it any more, its leave text goes upstream once.",
        discussion: "Releases this connection's hold, or the daemon-scope hold; keys held by other running clients stay theirs."
    )

    @OptionGroup var global: GlobalOptions

    @Option(help: ArgumentHelp("Send this text when the key goes, instead of its on_unstick text.", valueName: "text"))
    var text: String?

    @Argument(help: "The sticky key.")
    var key: String

    func run() throws {
        try self.global.show(.unstick(key: self.key, text: self.text, scope: nil)) { result in
            let r = try UnstickResult(json: result)
            switch (r.holders, r.leave) {
            case (let n, _) where n > 0: return "released; \(r.key) is still held by \(n) other holder\(n == 1 ? "" : "s")"
            case (_, "sent"): return "\(r.key) removed; its leave text was sent"
            case (_, "skipped"): return "\(r.key) removed; the link is not open, so no leave text was needed"
            default: return "\(r.key) removed"
            }
        }
    }
}
