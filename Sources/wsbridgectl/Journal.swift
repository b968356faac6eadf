import ArgumentParser
import WSBridgeProtocol

struct Journal: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show the journal of upstream messages: what it keeps, its files and its writer.",
        discussion: "With --json: the status reply's \"journal\" object (null when journal.dir is not set)."
    )

    @OptionGroup var global: GlobalOptions

    func run() throws {
        let result = try self.global.run(.status)
        let journal = result["journal"] ?? .null
        if self.global.json {
            Output.line(journal.serialized)
            return
        }
        guard journal != .null else {
            Output.line("the journal is off: set journal.dir in the daemon's configuration (docs/journal.md), then restart it")
            return
        }
        Output.line(try Self.table(StatusReport(json: result)))
    }

    static func table(_ s: StatusReport) throws -> String {
        guard let j = s.journal else { return "" }
        var rows: [(String, String)] = []
        rows.append(("directory", j.dir))
        rows.append(("state", j.stoppedReason.map { "stopped: \($0)" } ?? "writing (fsync \(j.fsync))"))
        rows.append(("stream", s.stream))
        switch j.opened {
        case "continued": rows.append(("this run", "went on in the stream the last run stopped cleanly in"))
        case "after_crash":
            rows.append(("this run", "began a new stream: the last one stopped without a clean shutdown (consumers resuming get a not_durable gap)"))
        case "new": rows.append(("this run", "began the journal"))
        default: break
        }
        if let oldest = j.oldestSeq, let newest = j.newestSeq {
            rows.append(("oldest", "seq \(oldest)" + (j.oldestTs.map { ", \(Status.time(Double($0))) (\(Status.ago(Double($0))))" } ?? "")))
            rows.append(("newest", "seq \(newest)" + (j.newestTs.map { ", \(Status.time(Double($0))) (\(Status.ago(Double($0))))" } ?? "")))
            rows.append(("last seq", "\(s.seq) (\(s.seq >= newest ? s.seq - newest : 0) not written yet)"))
        } else {
            rows.append(("messages", "none yet"))
        }
        rows.append(("on disk", "\(Status.bytes(UInt64(j.bytes))) in \(j.segments) segment\(j.segments == 1 ? "" : "s")"))
        rows.append(("fdatasyncs", "\(j.fsyncs)"))
        rows.append(("not journaled", "\(j.notJournaled) message\(j.notJournaled == 1 ? "" : "s")"))
        rows.append(("replaying", "\(j.replaying) consumer\(j.replaying == 1 ? "" : "s")"))
        let width = rows.map(\.0.count).max() ?? 0
        return rows.map { $0.0 + String(repeating: " ", count: width - $0.0.count + 2) + $0.1 }.joined(separator: "\n")
    }
}
