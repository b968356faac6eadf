import Foundation
import NIOConcurrencyHelpers

/// Collects a process's output lines and lets tests await a line matching a predicate.
///
/// Awaiting is event-driven: a waiter resumes as soon as a matching line arrives. The timeout is
/// only a guard against a hung test, never the synchronisation itself.
final class LineCollector: Sendable {
    private struct Waiter {
        var id: Int
        var from: Int
        var predicate: @Sendable (String) -> Bool
        var continuation: CheckedContinuation<String?, Never>
    }

    private struct State {
        var lines: [String] = []
        var partial = Data()
        var waiters: [Waiter] = []
        var nextID = 0
        var closed = false
    }

    /// A pthread mutex (NIOLockedValueBox), not Synchronization.Mutex: ThreadSanitizer sees
    /// through the one, while the other's futex is uninstrumented and reads as a race.
    private let state = NIOLockedValueBox(State())
    let name: String

    init(name: String) {
        self.name = name
    }

    /// Collects what `fd` yields, read on a thread of its own blocked in read(2), until EOF or an
    /// error (ECONNRESET from a killed daemon reads as the end); then the collector is closed.
    /// No dispatch source: libdispatch can crash when a descriptor it watches is closed under
    /// it. The thread holds `owner` (whatever closes `fd`), so the descriptor stays open until
    /// the reading has ended.
    func follow(_ fd: Int32, holding owner: any Sendable) {
        Thread {
            var chunk = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = read(fd, &chunk, chunk.count)
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { break }
                self.append(Data(chunk[0..<n]))
            }
            self.append(Data())
            withExtendedLifetime(owner) {}
        }.start()
    }

    var lines: [String] { self.state.withLockedValue { $0.lines } }
    var count: Int { self.state.withLockedValue { $0.lines.count } }
    var text: String { self.lines.joined(separator: "\n") }

    func append(_ data: Data) {
        var ready: [(CheckedContinuation<String?, Never>, String?)] = []
        self.state.withLockedValue { s in
            if data.isEmpty {
                s.closed = true
                if !s.partial.isEmpty {
                    s.lines.append(String(decoding: s.partial, as: UTF8.self))
                    s.partial.removeAll()
                }
            } else {
                s.partial.append(data)
                while let nl = s.partial.firstIndex(of: 0x0A) {
                    let line = String(decoding: s.partial[s.partial.startIndex..<nl], as: UTF8.self)
                    s.partial.removeSubrange(s.partial.startIndex...nl)
                    s.lines.append(line)
                }
            }
            // Each waiter scans only lines it has not seen yet.
            var remaining: [Waiter] = []
            for var w in s.waiters {
                if let hit = s.lines[min(w.from, s.lines.count)...].first(where: w.predicate) {
                    ready.append((w.continuation, hit))
                } else if s.closed {
                    ready.append((w.continuation, nil))
                } else {
                    w.from = s.lines.count
                    remaining.append(w)
                }
            }
            s.waiters = remaining
        }
        for (c, line) in ready { c.resume(returning: line) }
    }

    /// Waits for a line (at index `from` or later) matching `predicate`. Returns nil on timeout or EOF.
    func wait(from: Int = 0, timeout: Duration = .seconds(20), _ predicate: @escaping @Sendable (String) -> Bool) async -> String? {
        let id = self.state.withLockedValue { s -> Int in
            s.nextID += 1
            return s.nextID
        }
        let timer = Task {
            try await Task.sleep(for: timeout)
            self.cancel(id)
        }
        defer { timer.cancel() }
        return await withCheckedContinuation { (c: CheckedContinuation<String?, Never>) in
            let immediate: String?? = self.state.withLockedValue { s in
                if let hit = s.lines[min(from, s.lines.count)...].first(where: predicate) { return .some(hit) }
                if s.closed { return .some(nil) }
                s.waiters.append(Waiter(id: id, from: from, predicate: predicate, continuation: c))
                return .none
            }
            if let immediate { c.resume(returning: immediate) }
        }
    }

    /// Waits for `count` matching lines from `from` on; returns the matching lines (fewer on timeout).
    func wait(count: Int, from: Int = 0, timeout: Duration = .seconds(20), _ predicate: @escaping @Sendable (String) -> Bool) async -> [String] {
        let deadline = ContinuousClock.now + timeout
        var cursor = from
        var found: [String] = []
        while found.count < count {
            let remaining = deadline - ContinuousClock.now
            guard remaining > .zero, await self.wait(from: cursor, timeout: remaining, predicate) != nil else { break }
            let lines = self.lines
            guard let index = lines[cursor...].firstIndex(where: predicate) else { break }
            found.append(lines[index])
            cursor = index + 1
        }
        return found
    }

    func wait(from: Int = 0, timeout: Duration = .seconds(20), containing text: String) async -> String? {
        await self.wait(from: from, timeout: timeout) { $0.contains(text) }
    }

    private func cancel(_ id: Int) {
        let c = self.state.withLockedValue { s -> CheckedContinuation<String?, Never>? in
            guard let i = s.waiters.firstIndex(where: { $0.id == id }) else { return nil }
            return s.waiters.remove(at: i).continuation
        }
        c?.resume(returning: nil)
    }
}
