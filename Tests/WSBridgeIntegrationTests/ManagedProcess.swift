import Foundation

/// A child process started by a test: stdout and stderr collected line by line, stdin open for
/// commands, killed by PID (and only that PID) when the test ends.
final class ManagedProcess: Sendable {
    let process: Process
    let stdout: LineCollector
    let stderr: LineCollector
    private let exits: LineCollector
    private let stdin: FileHandle
    /// What a daemon sends to NOTIFY_SOCKET (`DaemonEvents.swift`), when the test listens.
    let events: DatagramListener?

    /// `journalStream`: tell the child (JOURNAL_STREAM) that its stderr is the journal, as systemd does.
    init(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil, name: String? = nil, journalStream: Bool = false,
        events: DatagramListener? = nil
    ) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let environment {
            process.environment = environment
        }
        let label = name ?? URL(fileURLWithPath: executable).lastPathComponent
        let out = Pipe()
        let err = Pipe()
        let input = Pipe()
        if journalStream {
            var st = stat()
            fstat(err.fileHandleForWriting.fileDescriptor, &st)
            var env = environment ?? ProcessInfo.processInfo.environment
            env["JOURNAL_STREAM"] = "\(st.st_dev):\(st.st_ino)"
            process.environment = env
        }
        process.standardOutput = out
        process.standardError = err
        process.standardInput = input
        let stdout = LineCollector(name: "\(label).stdout")
        let stderr = LineCollector(name: "\(label).stderr")
        // A reader thread per pipe, until EOF (`LineCollector.follow`).
        stdout.follow(out.fileHandleForReading.fileDescriptor, holding: out.fileHandleForReading)
        stderr.follow(err.fileHandleForReading.fileDescriptor, holding: err.fileHandleForReading)
        let exits = LineCollector(name: "\(label).exit")
        self.exits = exits
        process.terminationHandler = { p in exits.append(Data("exit \(p.terminationStatus)\n".utf8)) }
        try process.run()
        self.process = process
        self.stdout = stdout
        self.stderr = stderr
        self.stdin = input.fileHandleForWriting
        self.events = events
    }

    var pid: Int32 { self.process.processIdentifier }
    var isRunning: Bool { self.process.isRunning }

    func send(_ line: String) {
        try? self.stdin.write(contentsOf: Data((line + "\n").utf8))
    }

    /// Ends the child's stdin (a pipe): EOF for it.
    func closeInput() {
        try? self.stdin.close()
    }

    func signal(_ signal: Int32) {
        if self.process.isRunning { kill(self.process.processIdentifier, signal) }
    }

    /// Waits for exit (guarded by a timeout, after which it is killed) and returns the status.
    func waitForExit(timeout: Duration = .seconds(20)) async -> Int32 {
        if await self.exits.wait(timeout: timeout, containing: "exit") == nil {
            self.signal(SIGKILL)
            _ = await self.exits.wait(timeout: .seconds(5), containing: "exit")
        }
        // The exit can be seen before the last output is read: wait for both pipes' EOF.
        _ = await self.stderr.wait(timeout: .seconds(5)) { _ in false }
        _ = await self.stdout.wait(timeout: .seconds(5)) { _ in false }
        // Foundation traps on a running process's status (it would end the whole test run): one
        // that is still running after SIGKILL and the waits above is reported as -1.
        guard !self.process.isRunning else { return -1 }
        return self.process.terminationStatus
    }

    func stop() {
        self.signal(SIGKILL)
        try? self.stdin.close()
    }

    deinit {
        if self.process.isRunning { kill(self.process.processIdentifier, SIGKILL) }
    }
}
