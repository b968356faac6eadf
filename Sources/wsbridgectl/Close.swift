import ArgumentParser
import WSBridgeProtocol

struct Close: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Close the upstream link; it stays closed until `wsbridgectl connect`."
    )

    @OptionGroup var global: GlobalOptions

    @Option(help: "Close code: 1000, 1001 or 3000-4999.")
    var code: UInt16 = 1000

    @Option(help: "Close reason (at most 123 bytes).")
    var reason: String = ""

    func run() throws {
        try self.global.runLinkCommand(.close(code: self.code, reason: self.reason))
    }
}
