import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// `request`s waiting for their matching upstream message, with their timeout timers, and how
/// many each client has waiting (bounded by `local.max_pending_requests` and `_total`). The one
/// owner of the table and its timers: the plane asks it to wait, the fan-out to answer or to
/// fail what waits; nothing else changes it. Confined to the daemon's event loop.
final class PendingRequests {
    struct Entry {
        var client: LocalClient
        var id: JSONValue?
        var match: Filter
    }

    /// What `wait` returns: cancels that request (its send was refused).
    struct Key: Hashable {
        fileprivate var value: Int
    }

    private struct Waiting {
        var entry: Entry
        var timer: Scheduled<Void>
    }

    private var waiting: [Int: Waiting] = [:]
    private var perClient: [Int: Int] = [:]
    private var nextKey = 0
    private let eventLoop: any EventLoop

    init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    var count: Int { self.waiting.count }
    var isEmpty: Bool { self.waiting.isEmpty }

    func count(of client: LocalClient) -> Int { self.perClient[client.id] ?? 0 }

    /// Waits for the upstream message `entry.match` selects, for `timeout`; `expired` is told
    /// (and the request gone) if none came.
    func wait(_ entry: Entry, timeout: Duration, expired: @escaping (Entry) -> Void) -> Key {
        self.nextKey += 1
        let key = self.nextKey
        let timer = self.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(timeout.nanoseconds)) {
            guard let gone = self.remove(key) else { return }
            expired(gone)
        }
        self.waiting[key] = Waiting(entry: entry, timer: timer)
        self.perClient[entry.client.id, default: 0] += 1
        return Key(value: key)
    }

    /// Stops waiting for a request; false if it was answered, failed or expired already.
    @discardableResult
    func cancel(_ key: Key) -> Bool {
        self.remove(key.value) != nil
    }

    /// The client went away: what it waits for goes with it.
    func cancelAll(of client: LocalClient) {
        for (key, w) in self.waiting where w.entry.client === client {
            self.remove(key)
        }
    }

    /// Removes and returns every request, oldest first (the link went down: none can be answered).
    func takeAll() -> [Entry] {
        let all = self.waiting.sorted { $0.key < $1.key }
        for (key, _) in all { self.remove(key) }
        return all.map(\.value.entry)
    }

    /// Removes and returns the requests `message` answers.
    func takeMatches(_ message: JSONValue) -> [Entry] {
        var matched: [Entry] = []
        for (key, w) in self.waiting where w.entry.match.matches(message) {
            if let e = self.remove(key) { matched.append(e) }
        }
        return matched
    }

    @discardableResult
    private func remove(_ key: Int) -> Entry? {
        guard let w = self.waiting.removeValue(forKey: key) else { return nil }
        w.timer.cancel()
        let left = (self.perClient[w.entry.client.id] ?? 1) - 1
        self.perClient[w.entry.client.id] = left > 0 ? left : nil
        return w.entry
    }
}

@available(*, unavailable)
extension PendingRequests: Sendable {}
