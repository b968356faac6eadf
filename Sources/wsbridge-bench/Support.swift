import ArgumentParser
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

#if canImport(Glibc)
    import Glibc
#endif

/// A child process with line-oriented stdout and a stdin for commands.
final class Child: Sendable {
    let process: Process
    private let input: FileHandle
    private let lines = NIOLockedValueBox<[String]>([])
    private let partial = NIOLockedValueBox<Data>(Data())

    init(_ path: String, _ arguments: [String]) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: path)
        p.arguments = arguments
        let out = Pipe()
        let inp = Pipe()
        p.standardOutput = out
        p.standardInput = inp
        p.standardError = FileHandle.standardError
        self.process = p
        self.input = inp.fileHandleForWriting
        let lines = self.lines
        let partial = self.partial
        // A blocking reader thread until EOF, not a readability handler: libdispatch can crash
        // when a descriptor it watches goes away under it.
        let output = out.fileHandleForReading
        let reader = Thread {
            var chunk = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = read(output.fileDescriptor, &chunk, chunk.count)
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { break }
                let data = Data(chunk[0..<n])
                partial.withLockedValue { buf in
                    buf.append(data)
                    while let nl = buf.firstIndex(of: 0x0A) {
                        let line = String(decoding: buf[buf.startIndex..<nl], as: UTF8.self)
                        buf.removeSubrange(buf.startIndex...nl)
                        lines.withLockedValue { $0.append(line) }
                    }
                }
            }
        }
        try p.run()
        reader.start()
    }

    var pid: Int32 { self.process.processIdentifier }

    func send(_ line: String) { try? self.input.write(contentsOf: Data((line + "\n").utf8)) }

    /// Closes the child's stdin (a stalled reader then lets go of its connections).
    func closeInput() { try? self.input.close() }

    /// Waits for (and consumes) the first line matching `predicate`.
    func waitLine(seconds: Int = 30, _ predicate: (String) -> Bool) async throws -> String {
        for _ in 0..<(seconds * 200) {
            let hit = self.lines.withLockedValue { lines -> String? in
                guard let i = lines.firstIndex(where: predicate) else { return nil }
                return lines.remove(at: i)
            }
            if let hit { return hit }
            try await Task.sleep(for: .milliseconds(5))
        }
        throw BenchError("\(self.process.executableURL?.lastPathComponent ?? "child") printed no expected line within \(seconds) s")
    }

    func stop() {
        if self.process.isRunning { kill(self.process.processIdentifier, SIGTERM) }
    }

    /// SIGTERM (or SIGKILL at once), then waits (SIGKILL after 10 s) so the next run starts on a
    /// quiet machine. Children inherit this process's blocked signals (the Swift runtime's threads
    /// block them), so a child that does not read them from a signalfd, as wsbridged does, never
    /// sees the SIGTERM: the baselines are killed outright.
    func stopAndWait(kill now: Bool = false) async {
        if now, self.process.isRunning { kill(self.process.processIdentifier, SIGKILL) }
        self.stop()
        for i in 0..<2000 where self.process.isRunning {
            if i == 1000 { kill(self.process.processIdentifier, SIGKILL) }
            try? await Task.sleep(for: .milliseconds(10))
        }
    }
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// One line to stdout at once (progress lines must not wait in a buffer).
func emitLine(_ line: String) {
    var text = line + "\n"
    text.withUTF8 { bytes in _ = write(1, bytes.baseAddress, bytes.count) }
}

/// `subscribers` connections of `wsbridge-reader` on `socket`, shared by up to 4 processes (the
/// readers must not be what limits a bridge).
func startReaders(bin: String, socket: String, subscribers: Int, extra: [String] = []) throws -> [Child] {
    var readers: [Child] = []
    let processes = min(4, subscribers)
    var remaining = subscribers
    for p in 0..<processes {
        let n = (remaining + (processes - p) - 1) / (processes - p)
        readers.append(try Child("\(bin)/wsbridge-reader", ["--socket", socket, "--connections", "\(n)"] + extra))
        remaining -= n
    }
    return readers
}

/// The builds a benchmark runs: `--bin`, `--daemon` and `--baseline-daemon` (the suite and the
/// cost count).
struct Builds: ParsableArguments {
    @Option(help: "Folder with wsbridged, wsbridge-testserver, wsbridge-reader and wsbridge-bench (a release build).")
    var bin: String

    @Option(help: "The wsbridged to measure (default: the one in --bin), e.g. an older build.")
    var daemon: String?

    @Option(help: "Another wsbridged build (e.g. the commit before a change) measured beside this one.")
    var baselineDaemon: String?

    /// The wsbridged to measure.
    var wsbridged: String { self.daemon ?? "\(self.bin)/wsbridged" }

    /// The builds to measure side by side: `wsbridged`, and `baseline` when given.
    var daemons: [(name: String, path: String)] {
        [("wsbridged", self.wsbridged)] + (self.baselineDaemon.map { [("baseline", $0)] } ?? [])
    }
}
