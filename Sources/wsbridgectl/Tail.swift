import ArgumentParser
import WSBridgeProtocol

struct Tail: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Follow upstream messages, like tail -f (Ctrl-C ends).",
        discussion: "Prints each message's payload on its own line; --json prints the daemon's lines as they are."
    )

    @OptionGroup var global: GlobalOptions

    @Option(help: "Resume after this sequence number (buffered messages are replayed; missing ones are reported).")
    var since: UInt64?

    @Option(help: ArgumentHelp("Only messages whose JSON FIELD (a dotted path) equals VALUE, or has FIELD at all.", valueName: "field[=value]"))
    var filter: String?

    func run() throws {
        let connection = try self.global.connect()
        var fields: [(String, JSONValue)] = []
        if let since { fields.append(("since", .number(JSONNumber(since)))) }
        if let filter { fields.append(("filter", FieldMatch.parse(filter).json)) }
        do {
            let result = try connection.request("subscribe", fields, unsubscribeFirst: false)
            let filterNote = self.filter.map { ", only \($0)" } ?? ""
            Output.error("following \(self.global.socketPath) from seq \(result["seq"]?.intValue ?? 0)\(filterNote); Ctrl-C ends")
        } catch let error as DaemonConnection.RequestError {
            Output.error(error.description)
            throw ExitCode(error.exitCode)
        }
        while let (raw, line) = try connection.readRawLine() {
            switch line["type"]?.stringValue {
            case "message":
                if self.global.json {
                    // Exactly as received: nothing re-serialized.
                    Output.line(String(decoding: raw, as: UTF8.self))
                } else if let inline = line["json"] {
                    Output.line(inline.serialized)
                } else if line["kind"] == "binary" {
                    Output.line("[binary, base64] " + (line["data"]?.stringValue ?? ""))
                } else {
                    Output.line(line["data"]?.stringValue ?? "")
                }
            case "state", "dropped", "gap":
                if self.global.json {
                    Output.line(String(decoding: raw, as: UTF8.self))
                } else {
                    Output.error(Self.notice(line))
                }
            default:
                continue
            }
        }
        Output.error("wsbridged closed the connection")
        throw ExitCode(69)
    }

    static func notice(_ line: JSONValue) -> String {
        switch line["type"]?.stringValue {
        case "state": "link \(line["state"]?.stringValue ?? "?"): \(line["reason"]?.stringValue ?? "")"
        case "dropped": "dropped \(line["count"]?.intValue ?? 0) messages (seq \(line["from"]?.intValue ?? 0)-\(line["to"]?.intValue ?? 0)): this reader fell behind"
        case "gap": "messages \(line["from"]?.intValue ?? 0)-\(line["to"]?.intValue ?? 0) are no longer buffered"
        default: line.serialized
        }
    }
}

/// `FIELD=VALUE` or `FIELD`: VALUE is read as JSON when it is JSON (`7`, `true`, `"x"`), else as text.
enum FieldMatch {
    static func parse(_ text: String) -> Filter {
        guard let eq = text.firstIndex(of: "=") else { return Filter(field: text, equals: nil) }
        let field = String(text[..<eq])
        let raw = String(text[text.index(after: eq)...])
        let value = (try? JSONValue.parse(raw)) ?? .string(raw)
        return Filter(field: field, equals: value)
    }
}
