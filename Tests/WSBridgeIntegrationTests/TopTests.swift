import Foundation
import Glibc
import Testing
import WSBridgeProtocol

/// `wsbridgectl top` through a pseudo-terminal, as an operator runs it (issue 44): it draws the
/// connection and the subscribers in place, and q ends it with the terminal given back.
@Suite struct TopTests {
    /// A pseudo-terminal: the master (the test's side) and the slave's path (the program's).
    final class PseudoTerminal: @unchecked Sendable {
        let master: Int32
        let slave: Int32
        private let lock = NSLock()
        private var output: [UInt8] = []

        init() throws {
            // posix_openpt, unlockpt and ptsname as Linux has them (Swift's Glibc does not carry
            // them): the multiplexer, TIOCSPTLCK to unlock, TIOCGPTN for the slave's number.
            self.master = open("/dev/ptmx", O_RDWR | O_NOCTTY)
            var unlock: CInt = 0
            var number: CInt = 0
            guard self.master >= 0, ioctl(self.master, 0x4004_5431, &unlock) == 0, ioctl(self.master, 0x8004_5430, &number) == 0 else {
                throw TestFailure("no pseudo-terminal: \(String(cString: strerror(errno)))")
            }
            self.slave = open("/dev/pts/\(number)", O_RDWR | O_NOCTTY)
            guard self.slave >= 0 else { throw TestFailure("cannot open the pseudo-terminal's slave: \(String(cString: strerror(errno)))") }
            // Read on a thread of its own: what the program draws, kept.
            Thread.detachNewThread { [self] in
                var chunk = [UInt8](repeating: 0, count: 4096)
                while true {
                    let n = chunk.withUnsafeMutableBytes { read(self.master, $0.baseAddress, $0.count) }
                    if n <= 0 { return }
                    self.lock.withLock { self.output += chunk[0..<n] }
                }
            }
        }

        var text: String { self.lock.withLock { String(decoding: self.output, as: UTF8.self) } }

        func type(_ text: String) { _ = text.utf8CString.withUnsafeBytes { write(self.master, $0.baseAddress, text.utf8.count) } }

        /// Waits (20 s) until what was drawn satisfies `done`.
        func wait(_ what: String, _ done: (String) -> Bool) async throws {
            let deadline = ContinuousClock.now + .seconds(20)
            while !done(self.text) {
                guard ContinuousClock.now < deadline else { throw TestFailure("top never drew \(what); it drew: \(self.text.suffix(2000).debugDescription)") }
                try await Task.sleep(for: .milliseconds(20))
            }
        }

        deinit {
            close(self.slave)
            close(self.master)
        }
    }

    @Test func topDrawsTheConnectionAndTheSubscribersInPlaceAndQEndsIt() async throws {
        let f = try await DaemonFixture()
        let subscriber = try await f.client(name: "subscriber")
        subscriber.send(#"{"id":"s","op":"subscribe"}"#)
        #expect(await subscriber.reply("s")?["ok"] == true)
        let (top, terminal) = try Self.top(f.socket)
        defer { if top.isRunning { top.terminate() } }
        // Two frames: the second has rates, the header and the subscriber's row on both.
        try await terminal.wait("two frames with the connection and the subscriber") { text in
            text.components(separatedBy: "\u{1b}[H\u{1b}[2J").count >= 3 && text.contains("CONNECTION") && text.contains("CLIENT")
        }
        let frame = terminal.text.components(separatedBy: "\u{1b}[H\u{1b}[2J").last ?? ""
        #expect(frame.contains("open"), "\(frame)")
        // The subscriber (its pid, this process's) is a row: subscribed, nothing behind.
        let pid = "\(getpid())"
        #expect(frame.split(separator: "\r\n").contains { $0.contains(pid) && $0.contains("yes") }, "\(frame)")
        // Messages flow to it: its count (through `clients`, what top reads) rises with the feed.
        let before = try await Self.messages(of: pid, f.socket)
        f.server.command("send broadcast one")
        #expect(await subscriber.lines.wait(containing: "broadcast one") != nil)
        let after = try await Self.messages(of: pid, f.socket)
        #expect(after == before + 1)
        // The alternate screen, drawn in place (no scrolling output); q ends it and gives it back.
        #expect(terminal.text.hasPrefix("\u{1b}[?1049h"))
        terminal.type("q")
        let deadline = ContinuousClock.now + .seconds(20)
        while top.isRunning && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(!top.isRunning && top.terminationStatus == 0)
        try await terminal.wait("the screen given back") { $0.hasSuffix("\u{1b}[?25h\u{1b}[?1049l") }
    }

    /// A client holding a protocol subscription (`upstream.protocol`): the connection's row counts
    /// it, and each client's row names its program as the kernel does (`/proc/PID/comm`).
    @Test func topCountsProtocolSubscriptionsAndNamesEachClientsProgram() async throws {
        let dir = try TemporaryDirectory()
        let (peer, port) = try await JSONProtocolTests.peer()
        defer { peer.stop() }
        let (daemon, socket) = try await JSONProtocolTests.daemon(dir, port: port)
        defer { daemon.stop() }
        let app = try await JSONRPCProtocolTests.app(socket, "app")
        JSONProtocolTests.subscribe(app, id: 2, type: "alpha", request: "sa")
        #expect(await JSONRPCProtocolTests.waitFor(app) { $0["type"] == "event" } != nil)
        #expect(try daemonStatus(socket).protocol?.subscriptions.count == 1)
        let (top, terminal) = try Self.top(socket)
        defer { if top.isRunning { top.terminate() } }
        try await terminal.wait("a frame with the connection and the client") { text in
            text.components(separatedBy: "\u{1b}[H\u{1b}[2J").count >= 3 && text.contains("CONNECTION") && text.contains("PROGRAM")
        }
        let frame = terminal.text.components(separatedBy: "\u{1b}[H\u{1b}[2J").last ?? ""
        let rows = frame.split(separator: "\r\n").map { $0.split(separator: " ", omittingEmptySubsequences: true).map(String.init) }
        // CONNECTION STATE MSGS/S RTT SUBSCRIPTIONS ...: the one connection holds 1.
        let connection = rows.first { $0.first == "1" && $0.count >= 5 && $0[1] == "open" }
        #expect(connection?[4] == "1", "\(frame)")
        // The app's row: its pid (this process) and its program, as /proc names it.
        let comm = try String(contentsOfFile: "/proc/self/comm", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(rows.contains { $0.count >= 3 && $0[1] == "\(getpid())" && $0[2] == comm }, "\(comm): \(frame)")
        try await Self.quit(top, terminal)
    }

    /// `wsbridgectl top` for the daemon at `socket`, drawing every 0.2 s on a pseudo-terminal.
    static func top(_ socket: String) throws -> (Process, PseudoTerminal) {
        let terminal = try PseudoTerminal()
        let top = Process()
        top.executableURL = URL(fileURLWithPath: "\(Paths.bin)/wsbridgectl")
        top.arguments = ["--socket", socket, "top", "--interval", "0.2"]
        let tty = FileHandle(fileDescriptor: terminal.slave, closeOnDealloc: false)
        (top.standardInput, top.standardOutput, top.standardError) = (tty, tty, tty)
        try top.run()
        return (top, terminal)
    }

    /// q ends `top`; waits until it exited (a Process let go while its child runs mixes up file
    /// descriptors that are reused meanwhile).
    static func quit(_ top: Process, _ terminal: PseudoTerminal) async throws {
        terminal.type("q")
        let deadline = ContinuousClock.now + .seconds(20)
        while top.isRunning && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(!top.isRunning && top.terminationStatus == 0)
    }

    /// The messages the `clients` op (what top reads) counts for the subscriber of pid `pid`.
    static func messages(of pid: String, _ socket: String) async throws -> UInt64 {
        let asker = try await SocketClient.connected(to: socket, name: "asker")
        defer { asker.close() }
        asker.send(#"{"id":"c","op":"clients"}"#)
        guard let result = await asker.reply("c")?["result"] else { throw TestFailure("no clients reply: \(asker.lines.text)") }
        let clients = try ClientsResult(json: result)
        return clients.clients.first { "\($0.pid ?? -1)" == pid && $0.subscribed }?.messages ?? 0
    }

    @Test func topWithoutATerminalSaysWhatToUseInstead() async throws {
        let f = try await DaemonFixture()
        let r = try spawnAndWait("\(Paths.bin)/wsbridgectl", ["--socket", f.socket, "top"], stdin: "")
        #expect(r.status == 64 && r.stderr.contains("needs a terminal: use `wsbridgectl status`"), "\(r)")
    }
}
