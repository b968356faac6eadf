import ArgumentParser
import WSBridgeProtocol

struct Subscriptions: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the live upstream subscriptions the application protocol keeps, and the apps that hold them.",
        discussion: "Needs upstream.protocol set (docs/protocols.md). --json prints the status's \"protocol\" object."
    )

    @OptionGroup var global: GlobalOptions

    @Flag(help: "Send the set-aside subscriptions again (those after which the server closed the link on several opens in a row).")
    var clear = false

    func run() throws {
        if self.clear {
            let result = try self.global.run(.clearSetAside)
            let n = result["cleared"]?.intValue ?? 0
            Output.line(self.global.json ? result.serialized : "\(n) set-aside subscription\(n == 1 ? "" : "s") sent again")
            return
        }
        let result = try self.global.run(.status)
        let report = try StatusReport(json: result)
        guard let p = report.protocol else {
            Output.error("upstream.protocol is raw: the daemon keeps no subscriptions (every message goes to every subscriber)")
            throw ExitCode(1)
        }
        Output.line(self.global.json ? (result["protocol"]?.serialized ?? "null") : Self.table(p))
    }

    /// One row per holder: the upstream id, how many share it, since when, the app and its id.
    static func table(_ p: StatusReport.ApplicationProtocol) -> String {
        guard !p.subscriptions.isEmpty else { return "\(p.name): no live subscriptions" }
        var rows = [["UPSTREAM ID", "SHARED BY", "SINCE", "APP", "APP ID", "KEY"]]
        var notes: [String] = []
        for s in p.subscriptions {
            for holder in s.holders {
                let app =
                    holder.client == 0
                    ? "daemon (scope daemon)"
                    : "client \(holder.client)" + (holder.pid.map { " pid \($0)" } ?? "") + (holder.uid.map { " uid \($0)" } ?? "")
                let id = s.setAside != nil ? "(set aside)" : s.upstreamId
                rows.append([id, "\(s.holders.count)", Status.time(Double(s.since)), app, holder.id, String(s.key.prefix(60))])
            }
            if let why = s.setAside { notes.append("\(s.key.prefix(60)): \(why)") }
        }
        if let culprit = p.culprit { notes.append("last close right after open: \(culprit)") }
        let widths = (0..<rows[0].count).map { column in rows.map { $0[column].count }.max() ?? 0 }
        return rows.map { row in
            row.enumerated().map { i, cell in i == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[i] - cell.count + 2) }.joined()
        }.joined(separator: "\n") + notes.map { "\n" + $0 }.joined()
    }
}
