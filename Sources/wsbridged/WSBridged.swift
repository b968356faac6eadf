import ArgumentParser
import Logging
import ServiceLifecycle
import UnixSignals
import WSBridgeCore
import WSBridgeDaemon
import WSBridgeProtocol

#if canImport(Glibc)
    import Glibc
#endif

@main
struct WSBridged: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "wsbridged",
        abstract: "Hold one upstream WebSocket and share it with local processes.",
        discussion: """
            Reads its configuration from /etc/wsbridge/wsbridged.toml (every option is documented \
            in the shipped example). Command-line options override the file.
            """,
        version: WSBridgeVersion.description
    )

    static let defaultConfigPath = "/etc/wsbridge/wsbridged.toml"

    @Option(name: .long, help: ArgumentHelp("Configuration file.", valueName: "path"))
    var config: String?

    @Option(name: .long, help: ArgumentHelp("Upstream ws:// or wss:// URL (overrides upstream.url).", valueName: "url"))
    var url: String?

    @Option(name: .long, help: ArgumentHelp("Local Unix socket path (overrides local.socket).", valueName: "path"))
    var socket: String?

    @Option(
        name: [.customShort("H"), .long],
        help: ArgumentHelp("An HTTP header for the upgrade request, \"Name: value\" (repeatable; added to upstream.headers).", valueName: "header"))
    var header: [String] = []

    @Option(name: .long, help: ArgumentHelp("A subprotocol to offer (repeatable; replaces upstream.subprotocols).", valueName: "name"))
    var subprotocol: [String] = []

    @Option(name: .long, help: ArgumentHelp("File holding a bearer token, read at every connect (overrides auth.token_file).", valueName: "path"))
    var tokenFile: String?

    @Option(name: .long, help: ArgumentHelp("CA certificate (PEM) to trust for wss:// (overrides tls.ca_file).", valueName: "path"))
    var caFile: String?

    @Flag(name: .long, help: "Do not verify the server's certificate (tls.insecure; for tests only).")
    var insecure = false

    @Option(name: .long, help: ArgumentHelp("Proxy, http://HOST:PORT (CONNECT) or socks5://HOST:PORT (overrides proxy.url).", valueName: "url"))
    var proxy: String?

    @Option(name: .long, help: ArgumentHelp("Log level (overrides log.level): trace, debug, info, notice, warning, error, critical.", valueName: "level"))
    var logLevel: String?

    @Flag(name: .long, help: "Validate the configuration and exit (0 when valid).")
    var checkConfig = false

    @Flag(
        name: .long,
        help: ArgumentHelp(
            "Make the [fleet] stream and lease bucket where missing, say what was made or how what exists differs (changing nothing), and exit (0: as [fleet] says; 1: something differs)."
        ))
    var fleetInit = false

    func loadConfiguration() throws(ConfigurationError) -> Configuration {
        let path = self.config ?? Self.defaultConfigPath
        var configuration = Configuration()
        switch SmallFile.read(path: path, limit: 1 << 20) {
        case .success(let bytes):
            configuration = try ConfigurationCache.shared.load(
                text: String(decoding: bytes, as: UTF8.self), fileName: path, requiresURL: self.url == nil)
        case .failure(let problem):
            if self.config != nil || self.url == nil {
                throw ConfigurationError(
                    file: path,
                    problem: "cannot read the configuration file (\(problem)); pass --config PATH, or --url URL to run without one"
                )
            }
        }
        if let url = self.url {
            do {
                configuration.upstream.url = try UpstreamURL(parsing: url)
            } catch {
                throw ConfigurationError(file: "--url", key: "upstream.url", value: UpstreamURL.redacted(url), problem: error.description)
            }
        }
        for header in self.header {
            let parsed = try CommandLineSettings.header(header)
            configuration.upstream.headers.removeAll { $0.name.lowercased() == parsed.name.lowercased() }
            configuration.upstream.headers.append(parsed)
        }
        if !self.subprotocol.isEmpty {
            configuration.upstream.subprotocols = try self.subprotocol.map { (s: String) throws(ConfigurationError) -> String in
                try CommandLineSettings.subprotocol(s)
            }
        }
        if let path = self.tokenFile { configuration.auth.tokenFile = try CommandLineSettings.path(path, flag: "--token-file", key: "auth.token_file") }
        if let path = self.caFile { configuration.tls.caFile = try CommandLineSettings.path(path, flag: "--ca-file", key: "tls.ca_file") }
        if self.insecure { configuration.tls.insecure = true }
        if let proxy = self.proxy { configuration.proxy.url = try CommandLineSettings.proxy(proxy) }
        if let socket = self.socket {
            guard socket.hasPrefix("/") || socket.hasPrefix(".") else {
                throw ConfigurationError(file: "--socket", key: "local.socket", value: socket, problem: "must be a path")
            }
            configuration.local.socket = socket
        }
        if let level = self.logLevel {
            guard let l = Configuration.LogLevel(rawValue: level.lowercased()) else {
                throw ConfigurationError(
                    file: "--log-level",
                    key: "log.level",
                    value: level,
                    problem: "one of \(Configuration.LogLevel.allCases.map(\.rawValue).joined(separator: ", "))"
                )
            }
            configuration.log.level = l
        }
        return configuration
    }

    func run() async throws {
        let configuration: Configuration
        do {
            configuration = try self.loadConfiguration()
        } catch {
            Self.printError("wsbridged: \(error)")
            throw ExitCode(78)  // EX_CONFIG
        }
        if self.checkConfig {
            do {
                try DaemonService.checkFiles(configuration)
            } catch {
                Self.printError("wsbridged: \(self.config ?? Self.defaultConfigPath): \(error)")
                throw ExitCode(78)  // EX_CONFIG
            }
            let fleet = configuration.fleet
            let upstream =
                fleet.isOn && fleet.role == .follower
                ? "a follower: its upstream is the stream \(fleet.stream), subject \(fleet.subject), from \(fleet.servers.joined(separator: ", "))"
                : "upstream \(configuration.upstream.url)"
            let face = configuration.local.webSocket
            let faces = [face.listen.map { "\(face.isTLS ? "wss" : "ws")://\($0)/" }, face.socket.map { "ws+unix:\($0)" }].compactMap { $0 }
            let upstreamAndFace = faces.isEmpty ? upstream : "\(upstream); WebSocket face on \(faces.joined(separator: " and "))"
            // Without --config, the default file is read only where it exists (--url runs without one).
            if self.config != nil || access(Self.defaultConfigPath, R_OK) == 0 {
                print("\(self.config ?? Self.defaultConfigPath): configuration OK (\(upstreamAndFace))")
            } else {
                print("command line: configuration OK, no configuration file (\(Self.defaultConfigPath) does not exist; \(upstreamAndFace))")
            }
            return
        }
        if self.fleetInit {
            do {
                let report = try FleetInit.run(configuration)
                for line in report.lines { print(line) }
                if report.differs { throw ExitCode(1) }
            } catch let exit as ExitCode {
                throw exit
            } catch {
                Self.printError("wsbridged --fleet-init: \(error)")
                throw ExitCode(69)  // EX_UNAVAILABLE
            }
            return
        }
        DaemonService.blockSignals()
        let level = Logger.Level(rawValue: configuration.log.level.rawValue) ?? .info
        let journal = JournalLogHandler.stderrIsJournal
        LoggingSystem.bootstrap { _ in
            journal ? JournalLogHandler(identifier: "wsbridged", level: level) as any LogHandler : ConsoleLogHandler(level: level)
        }
        let logger = Logger(label: "wsbridged")
        var environment: [String: String] = [:]
        var cursor = environ
        while let entry = cursor.pointee {
            let pair = String(cString: entry)
            if let eq = pair.firstIndex(of: "=") {
                environment[String(pair[..<eq])] = String(pair[pair.index(after: eq)...])
            }
            cursor += 1
        }
        let load: @Sendable () throws -> Configuration = { [self] in try self.loadConfiguration() }
        let service = DaemonService(configuration: configuration, environment: environment, logger: logger, load: load)
        // SIGTERM and SIGINT: graceful shutdown (the service closes the upstream with 1001 and
        // flushes its subscribers); SIGHUP: reload, trapped by the service itself.
        let group = ServiceGroup(
            configuration: .init(
                services: [.init(service: service)],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger
            )
        )
        do {
            try await group.run()
        } catch let failure as DaemonService.StartFailure {
            throw ExitCode(failure.exitCode)
        } catch {
            logger.critical("cannot start: \(error)")
            throw ExitCode(1)
        }
    }

    static func printError(_ message: String) {
        let line = message + "\n"
        _ = line.withCString { write(2, $0, strlen($0)) }
    }
}
