import ArgumentParser
import ExtrasBase64
import WSBridgeProtocol

#if canImport(Glibc)
    import Glibc
#endif

struct Send: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send a message upstream (queued while the link is down).",
        discussion: """
            With TEXT, sends it as one text message. Without, reads standard input: each line is \
            one text message, or with --binary the whole input is one binary message.
            """
    )

    @OptionGroup var global: GlobalOptions

    @Flag(help: "Send standard input as one binary message.")
    var binary = false

    @Argument(help: "The text to send (words are joined with spaces).")
    var text: [String] = []

    func validate() throws {
        if self.binary && !self.text.isEmpty {
            throw ValidationError("--binary reads standard input; leave out TEXT")
        }
    }

    func run() throws {
        let connection = try self.global.connect()
        var payloads: [(String, JSONValue)] = []
        if !self.text.isEmpty {
            payloads = [("text", .string(self.text.joined(separator: " ")))]
        } else if self.binary {
            payloads = [("binary", .string(Base64.encodeToString(bytes: Self.readStandardInput())))]
        }
        do {
            if !payloads.isEmpty {
                self.report(try connection.request("send", payloads))
                return
            }
            // One message per line of standard input.
            var first = true
            for line in String(decoding: Self.readStandardInput(), as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false) {
                if line.isEmpty { continue }
                self.report(try connection.request("send", [("text", .string(String(line)))], unsubscribeFirst: first))
                first = false
            }
        } catch let error as DaemonConnection.RequestError {
            Output.error(error.description)
            throw ExitCode(error.exitCode)
        }
    }

    func report(_ result: JSONValue) {
        if self.global.json {
            Output.line(result.serialized)
        } else if case .queued(let depth, let state)? = SendResult(json: result) {
            Output.line("queued (\(depth) waiting; link is \(state))")
        } else {
            Output.line("sent")
        }
    }

    static func readStandardInput() -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(0, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            bytes.append(contentsOf: chunk[0..<n])
        }
        return bytes
    }
}
