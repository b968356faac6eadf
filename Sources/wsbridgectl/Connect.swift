import ArgumentParser
import WSBridgeProtocol

struct Connect: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Open the upstream link (after a close, or now instead of after the backoff delay).")

    @OptionGroup var global: GlobalOptions

    func run() throws {
        try self.global.runLinkCommand(.connect)
    }
}

struct Reconnect: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Drop the upstream link and connect again at once.")

    @OptionGroup var global: GlobalOptions

    func run() throws {
        try self.global.runLinkCommand(.reconnect)
    }
}
