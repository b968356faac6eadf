import ArgumentParser
import WSBridgeProtocol

struct Tail: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Follow upstream messages, like tail -f (Ctrl-C ends).",
        discussion: "Prints each message's payload on its own line; --json prints the daemon's lines as they are."
    )

    @OptionGroup var global: GlobalOptions

    func validate() throws {
        if self.stream != nil && self.since == nil { throw ValidationError("--stream goes with --since: the last seq you saw in that stream") }
        if [self.filter, self.prefix, self.contains].compactMap({ $0 }).count > 1 {
            throw ValidationError("give one of --filter, --prefix and --contains")
        }
        if self.all && self.since != nil {
            throw ValidationError("--all shows the live wire as it is, with nothing replayed: leave out --since")
        }
    }

    @Option(help: "Resume after this sequence number (buffered messages are replayed; missing ones are reported).")
    var since: UInt64?

    @Option(help: ArgumentHelp("The stream --since counts in (printed when tail starts): a restarted daemon is reported, not skipped.", valueName: "id"))
    var stream: String?

    @Option(help: ArgumentHelp("Only messages whose JSON FIELD (a dotted path) equals VALUE, or has FIELD at all.", valueName: "field[=value]"))
    var filter: String?

    @Flag(
        help:
            "The wire as it is: with upstream.protocol set, also what goes to one app alone or what the daemon answers itself, with the upstream's ids (needs write permission)."
    )
    var all = false

    @Option(help: ArgumentHelp("Only messages whose text begins with TEXT (any text, JSON or not).", valueName: "text"))
    var prefix: String?

    @Option(help: ArgumentHelp("Only messages whose text contains TEXT (any text, JSON or not).", valueName: "text"))
    var contains: String?

    /// The filter the options ask for, if any.
    var chosenFilter: Filter? {
        if let filter { return Filter(parsing: filter) }
        if let prefix { return Filter(.prefix(prefix)) }
        if let contains { return Filter(.contains(contains)) }
        return nil
    }

    func run() throws {
        let connection = try self.global.connect()
        let subscribe = Command.subscribe(filter: self.chosenFilter, since: self.since, stream: self.stream, all: self.all)
        do {
            let result = try SubscribeResult(json: try connection.request(subscribe, unsubscribeFirst: false))
            let filterNote = self.chosenFilter.map { ", only \($0.text)" } ?? ""
            let restarted =
                self.since.map { since in
                    GapLine.isRestart(since: since, stream: self.stream, current: result.stream ?? "", last: result.seq ?? 0)
                } ?? false
            let start = Self.following(self.global.socketPath, last: result.seq ?? 0, since: restarted ? nil : self.since)
            Output.error(start + "\(filterNote) (stream \(result.stream ?? "?")); Ctrl-C ends")
        } catch let error as DaemonSocket.RequestError {
            Output.error(error.description)
            throw ExitCode(error.exitCode)
        }
        while let (raw, json) = try connection.readRawLine() {
            guard let line = ServerLine.decode(json) else { continue }
            switch line {
            case .message(let message):
                if self.global.json {
                    // Exactly as received: nothing re-serialized.
                    Output.line(String(decoding: raw, as: UTF8.self))
                } else if let inline = message.inlineJSON {
                    Output.line(inline.serialized)
                } else if message.kind == .binary {
                    Output.line("[binary, base64] " + (message.data ?? ""))
                } else {
                    Output.line(message.data ?? "")
                }
            case .state, .dropped, .gap:
                if self.global.json {
                    Output.line(String(decoding: raw, as: UTF8.self))
                } else if let notice = Self.notice(line, knowsStream: self.stream != nil) {
                    Output.error(notice)
                }
            case .hello, .reply:
                continue
            }
        }
        Output.error("wsbridged closed the connection")
        throw ExitCode(69)
    }

    /// Where the output starts: after `since` (what is still buffered is replayed first), or
    /// with the next message.
    static func following(_ socket: String, last: UInt64, since: UInt64?) -> String {
        guard let since, since < last else { return "following \(socket): new messages from seq \(last + 1)" }
        return "following \(socket): replaying from seq \(since + 1) (as far as still buffered) up to \(last), then new messages"
    }

    /// `knowsStream`: whether --stream named the stream --since counts in (without it, a seq
    /// ahead of this stream's could be a restart or a wrong number).
    static func notice(_ line: ServerLine, knowsStream: Bool = true) -> String? {
        switch line {
        case .state(let s): "link \(s.state): \(s.reason)"
        case .dropped(let d): "dropped \(d.count) messages (seq \(d.from)-\(d.to)): this reader fell behind"
        case .gap(let g) where g.reason == GapLine.restarted && !knowsStream:
            "stream \(g.stream) has no seq \(g.since.map(String.init) ?? "?") yet: wsbridged restarted since, or the seq is wrong (--stream tells which); from seq \(g.next)"
        case .gap(let g):
            g.reason == GapLine.restarted
                ? "wsbridged restarted: what followed seq \(g.since.map(String.init) ?? "?") in the old stream is lost; now stream \(g.stream) from seq \(g.next)"
                : "messages \(g.from.map(String.init) ?? "?")-\(g.to.map(String.init) ?? "?") are no longer buffered (\(g.reason))"
        case .hello, .message, .reply: nil
        }
    }
}
