import ArgumentParser
import WSBridgeProtocol

struct Connect: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Open the upstream link (after a close, or now instead of after the backoff delay).")

    @OptionGroup var global: GlobalOptions

    func run() throws {
        let result = try self.global.run("connect")
        Output.line(self.global.json ? result.serialized : "connecting (state: \(result["state"]?.stringValue ?? "?"))")
    }
}

struct Reconnect: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Drop the upstream link and connect again at once.")

    @OptionGroup var global: GlobalOptions

    func run() throws {
        let result = try self.global.run("reconnect")
        Output.line(self.global.json ? result.serialized : "reconnecting (state: \(result["state"]?.stringValue ?? "?"))")
    }
}
