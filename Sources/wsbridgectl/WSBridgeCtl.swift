import ArgumentParser
import WSBridgeProtocol

@main
struct WSBridgeCtl: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "wsbridgectl",
        abstract: "Control and watch wsbridged, the shared upstream WebSocket.",
        discussion: """
            Talks to wsbridged over its Unix socket (newline-delimited JSON, see docs/protocol.md).
            Exit codes: 0 done, 1 the daemon refused the request, 64 usage error, 69 the daemon is \
            not running, 76 the daemon's reply does not read as this version's protocol, 77 \
            permission denied.
            """,
        version: WSBridgeVersion.description,
        subcommands: [
            Status.self, Metrics.self, Send.self, Sticky.self, Unstick.self, Close.self, Connect.self, Reconnect.self, Tail.self, Request.self, Journal.self,
            Subscriptions.self, Top.self,
        ],
        defaultSubcommand: Status.self
    )

    /// Lets `--socket` and `--json` also stand before the subcommand.
    @OptionGroup var global: GlobalOptions

    /// A word that is not a command would otherwise be taken as an argument of the default one
    /// (`status`, which takes none) and reported as "Unexpected argument" with status's usage:
    /// name the unknown command, the one it is close to, and every command.
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        let names = Self.configuration.subcommands.map { $0._commandName }
        if let word = Self.commandWord(arguments), !names.contains(word), word != "help" {
            Output.error(Self.unknownCommand(word, names: names))
            Self.exit(withError: ExitCode(64))
        }
        do {
            var command = try Self.parseAsRoot(arguments)
            try command.run()
        } catch let error as JSONValueDecodingError {
            // A reply of another protocol version: say so once, for every command.
            Output.error(
                "the daemon's reply does not read as this wsbridgectl's protocol (\(error)): use the wsbridgectl that came with the running wsbridged")
            Self.exit(withError: ExitCode(76))  // EX_PROTOCOL
        } catch {
            Self.exit(withError: error)
        }
    }

    static func unknownCommand(_ word: String, names: [String]) -> String {
        let hint = Suggestion.closest(to: word, in: names).map { ": did you mean '\($0)'?" } ?? "."
        return "unknown command '\(word)'\(hint) The commands are \(names.joined(separator: ", ")) (wsbridgectl COMMAND --help for one)."
    }

    /// The first word that is neither an option nor an option's value.
    static func commandWord(_ arguments: [String]) -> String? {
        // ArgumentParser's own: the completion script's generator and the shells' callback.
        if arguments.contains(where: { $0.hasPrefix("--generate-completion-script") || $0.hasPrefix("---completion") }) { return nil }
        var i = 0
        while i < arguments.count {
            let a = arguments[i]
            if a == "--" { return nil }
            if a == "--socket" || a == "--instance" {
                i += 2
                continue
            }
            if a.hasPrefix("-") {
                i += 1
                continue
            }
            return a
        }
        return nil
    }
}

struct GlobalOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp("The daemon's socket (default: $WSBRIDGE_SOCKET or \(LocalProtocol.defaultSocket)).", valueName: "path"),
        completion: .file()
    )
    var socket: String?

    @Option(
        name: .long,
        help: ArgumentHelp("A wsbridged@NAME instance: its socket, /run/wsbridged/NAME.sock (instead of --socket).", valueName: "name")
    )
    var instance: String?

    @Flag(name: .long, help: "Print the daemon's JSON instead of readable text.")
    var json = false

    func validate() throws {
        if let instance {
            guard !instance.isEmpty, !instance.contains("/"), instance != ".", instance != ".." else {
                throw ValidationError("--instance takes the NAME of wsbridged@NAME (no slashes); for a path, use --socket")
            }
            if self.socket != nil { throw ValidationError("--instance and --socket both name a socket: give one") }
        }
    }

    var socketPath: String {
        if let socket { return socket }
        if let instance { return "/run/wsbridged/\(instance).sock" }
        if let env = Environment.value("WSBRIDGE_SOCKET"), !env.isEmpty { return env }
        return LocalProtocol.defaultSocket
    }

    /// Connects, or exits with a message saying how to fix it.
    func connect() throws -> DaemonSocket {
        do {
            return try DaemonSocket(path: self.socketPath)
        } catch let error as DaemonSocket.ConnectError {
            Output.error(error.description)
            throw ExitCode(error.exitCode)
        }
    }

    /// Runs a link command (connect, reconnect, close) and says what it did in words, or the JSON.
    func runLinkCommand(_ command: Command) throws {
        let result = try self.run(command)
        Output.line(self.json ? result.serialized : Self.linkText(command.op, try LinkStateResult(json: result)))
    }

    static func linkText(_ op: Op, _ r: LinkStateResult) -> String {
        let stays = "it stays closed until `wsbridgectl connect`"
        switch (op, r.was, r.state) {
        case (.close, .idle?, _): return "the link was already closed; \(stays)"
        case (.close, _, .idle): return "closed; \(stays)"
        case (.close, _, _): return "closing the link; \(stays)"
        case (.connect, .open?, _): return "the link is already open"
        case (.connect, _, .open): return "open"
        case (.connect, _, let state): return "connecting (now \(state.readable))"
        case (_, _, let state): return "reconnecting (now \(state.readable))"
        }
    }

    /// Runs one request and prints its result: the daemon's JSON with --json, else `readable`'s text.
    func show(_ command: Command, readable: (JSONValue) throws -> String) throws {
        let result = try self.run(command)
        Output.line(self.json ? result.serialized : try readable(result))
    }

    /// Runs one request and returns its result, or exits with the daemon's error.
    func run(_ command: Command) throws -> JSONValue {
        let connection = try self.connect()
        do {
            return try connection.request(command)
        } catch let error as DaemonSocket.RequestError {
            Output.error(error.description)
            throw ExitCode(error.exitCode)
        }
    }
}
