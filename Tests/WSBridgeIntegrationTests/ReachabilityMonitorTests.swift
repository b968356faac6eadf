import Foundation
import Logging
import Synchronization
import Testing

@testable import WSBridgeDaemon

/// Records log messages, for tests that check what the daemon says.
final class RecordingLogHandler: LogHandler, Sendable {
    let messages = Mutex<[String]>([])
    var metadata: Logger.Metadata {
        get { [:] }
        set {}
    }
    var logLevel: Logger.Level {
        get { .trace }
        set {}
    }
    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { nil }
        set {}
    }

    func log(event: LogEvent) {
        self.messages.withLock { $0.append("\(event.level) \(event.message)") }
    }
}

@Suite struct ReachabilityMonitorTests {
    /// poll(2) failing (EINVAL here; the kernel gives it, for one, past RLIMIT_NOFILE
    /// descriptors) is said once per failure, and the monitor keeps checking at its poll interval
    /// instead of ending silently. The failure is injected: a real one cannot be made to order.
    @Test func aFailingPollIsLoggedAndTheMonitorKeepsChecking() async throws {
        let calls = Mutex(0)
        let (polls, continuation) = AsyncStream.makeStream(of: Int.self)
        let recorder = RecordingLogHandler()
        let monitor = ReachabilityMonitor(
            hosts: ["127.0.0.1"],
            pollInterval: .milliseconds(20),
            logger: Logger(label: "test", factory: { _ in recorder }),
            poll: { _, _, _ in
                let n = calls.withLock { count in
                    count += 1
                    return count
                }
                continuation.yield(n)
                errno = EINVAL
                return -1
            }
        )
        monitor.start(initial: true, callbacks: .init(changed: { _ in }, resumed: { _ in }))
        defer { monitor.stop() }
        // The fifth call means the monitor went on after four failures.
        for await n in polls where n >= 5 { break }
        #expect(calls.withLock { $0 } >= 5)
        let errors = recorder.messages.withLock { $0 }.filter { $0.contains("reachability: poll failed") }
        #expect(!errors.isEmpty && errors[0].contains("Invalid argument"), "\(recorder.messages.withLock { $0 })")
    }
}
