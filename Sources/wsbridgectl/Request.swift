import ArgumentParser
import WSBridgeProtocol

struct Request: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send a message and print the first upstream message that matches.",
        discussion: "Example: wsbridgectl request '{\"id\":7,\"op\":\"get\"}' --match id=7"
    )

    @OptionGroup var global: GlobalOptions

    @Argument(help: "The text to send.")
    var text: String

    @Option(help: ArgumentHelp("The answer's JSON FIELD must equal VALUE (or merely exist).", valueName: "field[=value]"))
    var match: String

    @Option(help: "Seconds to wait for the answer.")
    var timeout: Double = 10

    func run() throws {
        let filter = Filter(parsing: self.match)
        let result = try self.global.run(
            "request",
            [("text", .string(self.text)), ("match", filter.json), ("timeout", .number(JSONNumber(self.timeout)))]
        )
        if self.global.json {
            Output.line(result.serialized)
        } else {
            Output.line((try? RequestResult(json: result))?.payload.serialized ?? result.serialized)
        }
    }
}
