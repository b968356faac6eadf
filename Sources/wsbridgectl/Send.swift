import ArgumentParser
import ExtrasBase64
import WSBridgeProtocol

#if canImport(Glibc)
    import Glibc
#endif

extension StickyScope: ExpressibleByArgument {}

struct Send: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send a message upstream (queued while the link is down).",
        discussion: """
            With TEXT, sends it as one text message. Without, reads standard input: each line is \
            one text message, or with --binary the whole input is one binary message.

            With --sticky KEY the message is also sent again after every reconnect (after the \
            opening messages), until the key is released. Scope client (the default) holds it while \
            this command runs: it waits until interrupted (Ctrl-C), and the key goes with it. Scope \
            daemon keeps it until `wsbridgectl unstick KEY` (across restarts when queue.spool is set).
            """
    )

    @OptionGroup var global: GlobalOptions

    @Flag(help: "Send standard input as one binary message.")
    var binary = false

    @Option(help: ArgumentHelp("Send it again after every reconnect, under this key.", valueName: "key"))
    var sticky: String?

    @Option(help: ArgumentHelp("How long a sticky send lasts: client (while this command runs) or daemon (until unstick).", valueName: "scope"))
    var scope: StickyScope?

    @Option(name: .customLong("on-unstick"), help: ArgumentHelp("Text sent once when the sticky key goes (an unsubscribe).", valueName: "text"))
    var onUnstick: String?

    @Argument(help: "The text to send (words are joined with spaces).")
    var text: [String] = []

    func validate() throws {
        if self.binary && !self.text.isEmpty {
            throw ValidationError("--binary reads standard input; leave out TEXT")
        }
        if self.sticky == nil && (self.scope != nil || self.onUnstick != nil) {
            throw ValidationError("--scope and --on-unstick go with --sticky KEY")
        }
        if self.sticky != nil && self.text.isEmpty && !self.binary {
            throw ValidationError("--sticky needs the TEXT to send (or --binary with standard input)")
        }
    }

    /// What makes the send sticky.
    var stickyOptions: StickyOptions? {
        self.sticky.map { StickyOptions(key: $0, scope: self.scope ?? .client, onUnstick: self.onUnstick) }
    }

    func run() throws {
        let connection = try self.global.connect()
        var payload: Payload?
        if !self.text.isEmpty {
            payload = .text(self.text.joined(separator: " "))
        } else if self.binary {
            payload = .binary(Self.readStandardInput())
        }
        do {
            if let payload {
                self.report(try connection.request(.send(payload, sticky: self.stickyOptions)))
                if self.sticky != nil && (self.scope ?? .client) == .client {
                    // The key lasts as long as this connection: hold it until interrupted.
                    Output.error("holding sticky key \(self.sticky ?? ""); Ctrl-C releases it")
                    while try connection.readRawLine() != nil {}
                    Output.error("wsbridged closed the connection: the sticky key is gone")
                    throw ExitCode(69)
                }
                return
            }
            // One message per line of standard input.
            var first = true
            for line in String(decoding: Self.readStandardInput(), as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false) {
                if line.isEmpty { continue }
                self.report(try connection.request(.send(.text(String(line)), sticky: nil), unsubscribeFirst: first))
                first = false
            }
        } catch let error as DaemonSocket.RequestError {
            Output.error(error.description)
            throw ExitCode(error.exitCode)
        }
    }

    func report(_ result: JSONValue) {
        if self.global.json {
            Output.line(result.serialized)
        } else if case .answered? = try? SendResult(json: result) {
            Output.line("answered by wsbridged (upstream.protocol): nothing sent upstream")
        } else if case .queued(let depth, let state, let waits)? = try? SendResult(json: result) {
            switch waits {
            case .pace: Output.line("queued for the pace (upstream.limits): \(depth) waiting, sent as the pace allows")
            case .turn: Output.line("queued behind what the upstream has not taken yet (\(depth) waiting; the link is open)")
            case .link, nil: Output.line("queued until the link opens (\(depth) waiting; the link is \(state.readable))")
            }
        } else if case .sticky(let r)? = try? SendResult(json: result) {
            let holders = r.holders == 1 ? "1 holder" : "\(r.holders) holders"
            switch r.status {
            case .sent: Output.line("sent; sticky key \(r.key) (scope \(r.scope.rawValue), \(holders)) goes again after every reconnect")
            case .queued: Output.line("sticky key \(r.key) (scope \(r.scope.rawValue), \(holders)) goes when the link opens (the link is \(r.state.readable))")
            case .held: Output.line("sticky key \(r.key) is already held with this text: shared (\(holders)); nothing sent")
            }
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
