import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// Every `request` waiting for its answer, with its timeout timer, and how many each client has
/// waiting (bounded by `local.max_pending_requests` and `_total`, which count both kinds): those
/// with `match`, answered by the upstream message it selects (the fan-out answers them), and,
/// with `upstream.protocol`, those without, answered by what carries the id of the app's
/// protocol message (docs/protocols.md; the protocol layers answer them, on any connection). The
/// one owner of both tables and their timers: the plane asks it to wait, the fan-out and the
/// layers to answer, a leaving client's go with it; nothing else changes it. Confined to the
/// daemon's event loop.
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

    /// A request answered by id: its own id, for its reply.
    struct ByID {
        var id: JSONValue?
        fileprivate var timer: Scheduled<Void>
        /// The answer went; what else carries the id (a query's `complete`) is dropped.
        fileprivate var answered = false
    }

    private var waiting: [Int: Waiting] = [:]
    private var perClient: [Int: Int] = [:]
    private var nextKey = 0
    /// Requests answered by id: by client and the id's key.
    private var byID: [Int: [String: ByID]] = [:]
    private var byIDCount = 0
    private let eventLoop: any EventLoop

    init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    /// Requests waiting in all, of both kinds.
    var count: Int { self.waiting.count + self.byIDCount }
    /// Requests with `match` waiting (the fan-out reads each message for them).
    var matchedCount: Int { self.waiting.count }
    var hasMatched: Bool { !self.waiting.isEmpty }
    /// Requests answered by id waiting (the protocol layers look for their ids).
    var hasByID: Bool { self.byIDCount > 0 }

    /// `client`'s requests waiting, of both kinds.
    func count(of client: LocalClient) -> Int { (self.perClient[client.id] ?? 0) + (self.byID[client.id]?.count ?? 0) }

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
        self.cancelAnswers(of: client.id)
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

// MARK: - Requests answered by id

extension PendingRequests {
    /// Whether `client` waits for the answer to the message whose id has `key`.
    func isWaiting(_ client: LocalClient, _ key: String) -> Bool {
        self.byID[client.id]?[key] != nil
    }

    /// Waits for the answer to `client`'s message whose id has `key`, for `timeout`; `expired`
    /// is told (and the request gone) if none came.
    func waitForAnswer(_ client: LocalClient, key: String, id: JSONValue?, timeout: Duration, expired: @escaping () -> Void) {
        let clientID = client.id
        let timer = self.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(timeout.nanoseconds)) {
            guard let gone = self.removeByID(clientID, key), !gone.answered else { return }
            expired()
        }
        if let replaced = self.byID[clientID, default: [:]].updateValue(ByID(id: id, timer: timer), forKey: key) {
            replaced.timer.cancel()
        } else {
            self.byIDCount += 1
        }
    }

    /// Stops waiting for an answer by id (the message was refused); false if nothing waited.
    @discardableResult
    func cancelAnswer(_ client: LocalClient, key: String) -> Bool {
        guard let entry = self.removeByID(client.id, key) else { return false }
        entry.timer.cancel()
        return true
    }

    /// The app went away (a local client, or a fleet follower's app): what it waits for by id
    /// goes with it.
    func cancelAnswers(of app: AppID) {
        for (_, entry) in self.byID.removeValue(forKey: app) ?? [:] {
            entry.timer.cancel()
            self.byIDCount -= 1
        }
    }

    /// What an upstream message carrying the id with `key` does to `client`'s request.
    enum Answer {
        /// Nothing of the client's waits for it.
        case none
        /// The request had its answer already: this one is dropped.
        case answeredAlready
        /// The request's reply: the message goes to it.
        case reply(to: JSONValue?)
    }

    /// An upstream message carries the id with `key`; `final`: it ends the request (its entry
    /// and timer go), else the request stays until one that does (a query's `complete`).
    func answer(_ client: LocalClient, key: String, final: Bool) -> Answer {
        guard var entry = self.byID[client.id]?[key] else { return .none }
        if final {
            self.removeByID(client.id, key)
            entry.timer.cancel()
        }
        guard !entry.answered else { return .answeredAlready }
        if !final {
            entry.answered = true
            self.byID[client.id]?[key] = entry
        }
        return .reply(to: entry.id)
    }

    @discardableResult
    private func removeByID(_ clientID: Int, _ key: String) -> ByID? {
        guard let entry = self.byID[clientID]?.removeValue(forKey: key) else { return nil }
        self.byIDCount -= 1
        if self.byID[clientID]?.isEmpty == true { self.byID[clientID] = nil }
        return entry
    }
}

@available(*, unavailable)
extension PendingRequests: Sendable {}
