import Foundation
import Logging
import NIOConcurrencyHelpers
import Testing

@testable import WSBridgeDaemon

/// Records log messages, for tests that check what the daemon says.
final class RecordingLogHandler: LogHandler, Sendable {
    let messages = NIOLockedValueBox<[String]>([])
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
        self.messages.withLockedValue { $0.append("\(event.level) \(event.message)") }
    }
}

@Suite struct ReachabilityMonitorTests {
    /// poll(2) failing (EINVAL here; the kernel gives it, for one, past RLIMIT_NOFILE
    /// descriptors) is said once per failure, and the monitor keeps checking at its poll interval
    /// instead of ending silently. The failure is injected: a real one cannot be made to order.
    @Test func aFailingPollIsLoggedAndTheMonitorKeepsChecking() async throws {
        let calls = NIOLockedValueBox(0)
        let (polls, continuation) = AsyncStream.makeStream(of: Int.self)
        let recorder = RecordingLogHandler()
        let monitor = ReachabilityMonitor(
            hosts: ["127.0.0.1"],
            pollInterval: .milliseconds(20),
            logger: Logger(label: "test", factory: { _ in recorder }),
            poll: { _, _, _ in
                let n = calls.withLockedValue { count in
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
        #expect(calls.withLockedValue { $0 } >= 5)
        let errors = recorder.messages.withLockedValue { $0 }.filter { $0.contains("reachability: poll failed") }
        #expect(!errors.isEmpty && errors[0].contains("Invalid argument"), "\(recorder.messages.withLockedValue { $0 })")
    }

    /// A reload's wake-up and a noise-only rtnetlink batch seen by the same poll: the new hosts'
    /// route is checked at once, not a poll interval (an hour here) later. The noise is
    /// injected: the stand-in marks the rtnetlink socket readable whenever the wake pipe is.
    @Test func aWakeUpIsNotLostInTheSamePollAsRtnetlinkNoise() async throws {
        let (changes, continuation) = AsyncStream.makeStream(of: Bool.self)
        let monitor = ReachabilityMonitor(
            hosts: ["127.0.0.1"],
            pollInterval: .seconds(3600),
            logger: Logger(label: "test"),
            poll: { fds, count, timeout in
                let n = Glibc.poll(fds, count, timeout)
                if n > 0 && fds[1].revents != 0 {
                    fds[0].revents = Int16(POLLIN)
                    return 2
                }
                return n
            }
        )
        // It starts believing there is no route; only a check can say otherwise.
        monitor.start(initial: false, callbacks: .init(changed: { continuation.yield($0) }, resumed: { _ in }))
        defer { monitor.stop() }
        monitor.update(hosts: ["localhost"])
        let first = await withTaskGroup(of: Bool?.self) { group in
            group.addTask {
                for await change in changes { return change }
                return nil
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(30))
                return nil
            }
            defer { group.cancelAll() }
            return await group.next() ?? nil
        }
        #expect(first == true, "the route to the new host was not checked when the wake-up came")
    }

    @Test func noiseAloneSkipsTheCheckAndAnythingElseChecks() {
        #expect(ReachabilityMonitor.checkReason(woken: false, netlinkChanges: 0) == nil)
        #expect(ReachabilityMonitor.checkReason(woken: false, netlinkChanges: -EAGAIN) == nil)
        #expect(ReachabilityMonitor.checkReason(woken: true, netlinkChanges: 0) == "host changed")
        #expect(ReachabilityMonitor.checkReason(woken: false, netlinkChanges: 3) == "rtnetlink")
        #expect(ReachabilityMonitor.checkReason(woken: false, netlinkChanges: nil) == "poll")
    }
}
