import ArgumentParser
import WSBridgeProtocol

struct Request: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send a message and print the first upstream message that matches.",
        discussion: """
            Example: wsbridgectl request '{"id":7,"op":"get"}' --match id=7
            With upstream.protocol set (jsonrpc, graphql-transport-ws, json), --match may be left out: the answer is what carries the message's id.
            """
    )

    @OptionGroup var global: GlobalOptions

    @Argument(help: "The text to send.")
    var text: String

    @Option(
        help: ArgumentHelp(
            "The answer's JSON FIELD must equal VALUE (or merely exist). Needed when upstream.protocol is raw.", valueName: "field[=value]"))
    var match: String?

    @Option(help: "Seconds to wait for the answer.")
    var timeout: Double = 10

    func validate() throws {
        guard self.timeout.isFinite else { throw ValidationError("--timeout takes a number of seconds, more than 0 and at most 3600") }
    }

    func run() throws {
        // Out of range is the daemon's to refuse (it says what it accepts); clamped only so the
        // nanoseconds fit.
        let timeout = Duration.nanoseconds(Int64(max(-9e18, min(9e18, (self.timeout * 1e9).rounded()))))
        let result = try self.global.run(.request(.text(self.text), match: self.match.map { Filter(parsing: $0) }, timeout: timeout))
        if self.global.json {
            Output.line(result.serialized)
        } else {
            Output.line((try? RequestResult(json: result))?.payload.serialized ?? result.serialized)
        }
    }
}
