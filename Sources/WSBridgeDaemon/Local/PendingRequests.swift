import NIOCore
import WSBridgeProtocol

/// `request`s waiting for their matching upstream message, with their timeout timers, and how
/// many each client has waiting (bounded by `local.max_pending_requests` and `_total`).
struct PendingRequests {
    struct Entry {
        var client: LocalClient
        var id: JSONValue?
        var match: Filter
        var timer: Scheduled<Void>
    }

    private var entries: [Int: Entry] = [:]
    private var perClient: [Int: Int] = [:]
    private var nextKey = 0

    var count: Int { self.entries.count }
    var isEmpty: Bool { self.entries.isEmpty }

    func count(of client: LocalClient) -> Int { self.perClient[client.id] ?? 0 }

    /// A key for the next entry (its timer needs it before the entry exists).
    mutating func reserveKey() -> Int {
        self.nextKey += 1
        return self.nextKey
    }

    mutating func insert(_ entry: Entry, key: Int) {
        self.entries[key] = entry
        self.perClient[entry.client.id, default: 0] += 1
    }

    /// Removes an entry; its timer is cancelled.
    @discardableResult
    mutating func remove(_ key: Int) -> Entry? {
        guard let entry = self.entries.removeValue(forKey: key) else { return nil }
        entry.timer.cancel()
        let left = (self.perClient[entry.client.id] ?? 1) - 1
        self.perClient[entry.client.id] = left > 0 ? left : nil
        return entry
    }

    mutating func removeAll(of client: LocalClient) {
        for (key, entry) in self.entries where entry.client === client {
            self.remove(key)
        }
    }

    /// Removes and returns every request (their timers cancelled).
    mutating func takeAll() -> [Entry] {
        let all = self.entries.sorted { $0.key < $1.key }.map(\.value)
        for key in Array(self.entries.keys) { self.remove(key) }
        return all
    }

    /// Removes and returns the requests `message` answers.
    mutating func takeMatches(_ message: JSONValue) -> [Entry] {
        var matched: [Entry] = []
        for (key, entry) in self.entries where entry.match.matches(message) {
            if let e = self.remove(key) { matched.append(e) }
        }
        return matched
    }
}
