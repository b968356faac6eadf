import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// `request`s without `match`, answered by what carries the id of the app's protocol message
/// (docs/protocols.md): by client and that id's key, each with its reply id and timeout timer.
/// The one owner of the table and its timers: the plane asks it to wait, the fan-out to answer,
/// a leaving client's go with it; nothing else changes it. Confined to the daemon's event loop.
final class AppProtocolRequests {
    struct Entry {
        /// The `request`'s own id, for its reply.
        var id: JSONValue?
        fileprivate var timer: Scheduled<Void>
        /// The answer went; what else carries the id (a query's `complete`) is dropped.
        fileprivate var answered = false
    }

    private var waiting: [Int: [String: Entry]] = [:]
    /// Requests waiting in all (checked against local.max_pending_requests_total per request).
    private(set) var count = 0
    private let eventLoop: any EventLoop

    init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    var isEmpty: Bool { self.waiting.isEmpty }
    func count(of client: LocalClient) -> Int { self.waiting[client.id]?.count ?? 0 }

    /// Whether `client` waits for the answer to the message whose id has `key`.
    func isWaiting(_ client: LocalClient, _ key: String) -> Bool {
        self.waiting[client.id]?[key] != nil
    }

    /// Waits for the answer to `client`'s message whose id has `key`, for `timeout`; `expired`
    /// is told (and the request gone) if none came.
    func wait(_ client: LocalClient, key: String, id: JSONValue?, timeout: Duration, expired: @escaping (Entry) -> Void) {
        let clientID = client.id
        let timer = self.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(timeout.nanoseconds)) {
            guard let gone = self.remove(clientID, key), !gone.answered else { return }
            expired(gone)
        }
        if let replaced = self.waiting[clientID, default: [:]].updateValue(Entry(id: id, timer: timer), forKey: key) {
            replaced.timer.cancel()
        } else {
            self.count += 1
        }
    }

    /// Stops waiting (the message was refused); false if nothing waited.
    @discardableResult
    func cancel(_ client: LocalClient, key: String) -> Bool {
        guard let entry = self.remove(client.id, key) else { return false }
        entry.timer.cancel()
        return true
    }

    /// The app went away: what it waits for goes with it.
    func cancelAll(of app: AppID) {
        for (_, entry) in self.waiting.removeValue(forKey: app) ?? [:] {
            entry.timer.cancel()
            self.count -= 1
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
        guard var entry = self.waiting[client.id]?[key] else { return .none }
        if final {
            self.remove(client.id, key)
            entry.timer.cancel()
        }
        guard !entry.answered else { return .answeredAlready }
        if !final {
            entry.answered = true
            self.waiting[client.id]?[key] = entry
        }
        return .reply(to: entry.id)
    }

    @discardableResult
    private func remove(_ clientID: Int, _ key: String) -> Entry? {
        guard let entry = self.waiting[clientID]?.removeValue(forKey: key) else { return nil }
        self.count -= 1
        if self.waiting[clientID]?.isEmpty == true { self.waiting[clientID] = nil }
        return entry
    }
}

@available(*, unavailable)
extension AppProtocolRequests: Sendable {}
