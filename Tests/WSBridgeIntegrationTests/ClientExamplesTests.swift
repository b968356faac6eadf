import Foundation
import Testing
import WSBridgeProtocol

/// Every program in docs/clients.md, taken from the page as it is and run against a real daemon:
/// the subscriber prints messages, says what it lost when it read too slowly (`dropped`), rides
/// through a daemon restart (reconnects, resumes with `since`, reports the `gap`) and goes on;
/// the sender's sends arrive upstream.
@Suite struct ClientExamplesTests {
    /// The page's code blocks: ```LANG title=NAME.
    static func programs() throws -> [String: String] {
        let text = try String(contentsOfFile: "\(Paths.root)/docs/clients.md", encoding: .utf8)
        var programs: [String: String] = [:]
        var name: String?
        var body: [Substring] = []
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if let current = name {
                if line == "```" {
                    programs[current] = body.joined(separator: "\n") + "\n"
                    name = nil
                } else {
                    body.append(line)
                }
            } else if line.hasPrefix("```"), let title = line.split(separator: " ").first(where: { $0.hasPrefix("title=") }) {
                name = String(title.dropFirst("title=".count))
                body = []
            }
        }
        return programs
    }

    enum Language: String, CaseIterable, Sendable {
        case python, node, go, shell

        var files: (subscriber: String, sender: String) {
            switch self {
            case .python: ("subscriber.py", "send.py")
            case .node: ("subscriber.js", "send.js")
            case .go: ("subscriber.go", "send.go")
            case .shell: ("subscriber.sh", "send.sh")
            }
        }

        /// The command that runs `file` (written into `dir`); Go's are built first.
        func command(_ file: String, in dir: TemporaryDirectory) throws -> [String] {
            switch self {
            case .python: return ["/usr/bin/python3", dir.file(file)]
            case .node: return ["/usr/bin/env", "node", dir.file(file)]
            case .shell: return ["/bin/sh", dir.file(file)]
            case .go:
                let binary = dir.file(String(file.dropLast(3)))
                var env = ProcessInfo.processInfo.environment
                env["GOCACHE"] = dir.file("go-cache")
                env["GOPATH"] = dir.file("go-path")
                env["HOME"] = dir.path
                let build = try run("/usr/bin/go", ["build", "-o", binary, dir.file(file)], environment: env, directory: dir.path, allowFailure: true)
                guard build.status == 0 else { throw TestFailure("go build \(file): \(build.output)") }
                return [binary]
            }
        }

        var available: Bool {
            switch self {
            case .python: FileManager.default.isExecutableFile(atPath: "/usr/bin/python3")
            case .node: (try? run("/usr/bin/env", ["node", "--version"], allowFailure: true).status) == 0
            case .go: FileManager.default.isExecutableFile(atPath: "/usr/bin/go")
            case .shell: FileManager.default.isExecutableFile(atPath: "/usr/bin/jq") && FileManager.default.isExecutableFile(atPath: "/usr/bin/socat")
            }
        }
    }

    @Test func thePageHoldsASubscriberAndASenderPerLanguage() throws {
        let programs = try Self.programs()
        for language in Language.allCases {
            #expect(programs[language.files.subscriber] != nil, "\(language) subscriber")
            #expect(programs[language.files.sender] != nil, "\(language) sender")
        }
        #expect(programs.count == 2 * Language.allCases.count)
    }

    /// A daemon the test can restart on the same socket (a new stream each time).
    final class Daemon: @unchecked Sendable {
        let config: String
        var process: ManagedProcess

        init(config: String) async throws {
            self.config = config
            self.process = try Self.start(config)
            guard await self.process.awaitLink(.open) else { throw TestFailure("no open link: \(self.process.stderr.text)") }
        }

        static func start(_ config: String) throws -> ManagedProcess {
            try ManagedProcess.daemon(["--config", config, "--log-level", "debug"], name: "wsbridged")
        }

        func restart() async throws {
            self.process.signal(SIGTERM)
            _ = await self.process.waitForExit()
            self.process = try Self.start(self.config)
            guard await self.process.awaitLink(.open) else { throw TestFailure("no open link: \(self.process.stderr.text)") }
        }

        deinit { self.process.stop() }
    }

    /// Stops or continues a process and its children (the shell subscriber is a pipeline).
    static func signalTree(_ pid: Int32, _ signal: String) throws {
        _ = try run("/usr/bin/pkill", ["-\(signal)", "-P", "\(pid)"], allowFailure: true)
        _ = try run("/bin/kill", ["-\(signal)", "\(pid)"], allowFailure: true)
    }

    @Test(arguments: Language.allCases)
    func subscriberAndSenderAgainstARealDaemon(_ language: Language) async throws {
        try #require(language.available, "\(language) is not installed (scripts/setup installs it)")
        let dir = try TemporaryDirectory()
        let programs = try Self.programs()
        for file in [language.files.subscriber, language.files.sender] {
            _ = try dir.write(file, try #require(programs[file]))
        }
        let server = try await UpstreamServer(.nio)
        let socket = dir.file("d.sock")
        // A small per-subscriber queue (no burst past it) and socket buffer, so that a stopped
        // reader loses messages soon.
        let config = try writeDaemonConfig(
            dir, "wsbridged", url: server.url, socket: socket, extra: "subscriber_queue = 16\nsubscriber_queue_burst = 0\nsend_buffer_bytes = 4096")
        let daemon = try await Daemon(config: config)
        var env = ProcessInfo.processInfo.environment
        env["WSBRIDGE_SOCKET"] = socket
        env["HOME"] = dir.path

        let subscriberCommand = try language.command(language.files.subscriber, in: dir)
        let senderCommand = try language.command(language.files.sender, in: dir)
        let subscriber = try ManagedProcess(subscriberCommand[0], Array(subscriberCommand.dropFirst()), environment: env, name: "subscriber")
        defer { subscriber.stop() }
        try await awaitStatus(socket, "the subscriber") { $0.subscribers == 1 }

        // Messages, one line each: SEQ PAYLOAD.
        server.command("burst 3")
        let third = await subscriber.stdout.wait(containing: "\"n\":3,")
        #expect(third?.hasPrefix("3 {\"n\":3,") == true, "\(subscriber.stdout.lines.suffix(5))\(subscriber.stderr.text)")

        // The sender: both texts go upstream (the test server echoes them to every client).
        // (Under `timeout`: a sender that never exits fails the test instead of hanging it.)
        let sent = try spawnAndWait("/usr/bin/timeout", ["60"] + senderCommand + ["hello from \(language)", "second"], environment: env)
        #expect(sent.status == 0 && sent.stdout == "sent\nsent\n", "\(sent.stdout)\(sent.stderr)")
        #expect(await server.event("message hello from \(language)") != nil)
        #expect(await server.event("message second") != nil)
        #expect(await subscriber.stdout.wait(containing: " second") != nil, "\(subscriber.stdout.lines.suffix(5))")

        // Read too slowly: stopped while 1,000 messages of 2 KB (more than the socket buffers hold) pass, it is told what it lost.
        try Self.signalTree(subscriber.pid, "STOP")
        server.command("burst 1000 2000")
        try await awaitStatus(socket, "drops") { $0.drops > 0 }
        try Self.signalTree(subscriber.pid, "CONT")
        let dropped = await subscriber.stderr.wait(containing: "dropped ")
        #expect(dropped?.contains("reading too slowly") == true, "\(subscriber.stderr.text)")
        #expect(await subscriber.stdout.wait(containing: "\"n\":1003,") != nil)

        // The daemon restarts: the subscriber reconnects, resumes, is told of the gap (a new
        // stream), and goes on from the new stream's first message.
        let before = subscriber.stderr.count
        try await daemon.restart()
        let gap = await subscriber.stderr.wait(from: before, containing: "gap (restarted)")
        #expect(gap != nil, "\(subscriber.stderr.text)")
        try await awaitStatus(socket, "the subscriber back") { $0.subscribers == 1 }
        server.command("burst 2")
        #expect(await subscriber.stdout.wait(containing: "\"n\":1005,") != nil, "\(subscriber.stdout.lines.suffix(5))")
        let lines = subscriber.stdout.lines
        #expect(lines.contains { $0.hasPrefix("1 {\"n\":1004,") }, "\(lines.suffix(4))")
        // Nothing twice: each payload once.
        let numbered = lines.filter { $0.contains("{\"n\":") }
        #expect(Set(numbered.map { $0.split(separator: " ").dropFirst().joined() }).count == numbered.count, "a message printed twice")
    }
}
