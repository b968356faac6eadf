import WSBridgeProtocol

/// The sticky sends local clients registered: what goes upstream again after the opening
/// messages on every open, in the order the keys were first registered.
///
/// A key is held by one or more holders: client connections (scope `client`: the hold ends
/// with the connection) and at most one daemon hold (scope `daemon`: until `unstick`). Holders
/// of one key share one upstream send; a different text under a key someone else holds is a
/// conflict. When the last holder lets go, the key's leave text (`on_unstick`) is due. Pure:
/// the caller sends what the results say, when the link is open.
public struct StickyRegistry: Sendable {
    public enum Holder: Hashable, Sendable {
        case client(Int)
        case daemon

        public var scope: StickyScope {
            switch self {
            case .client: .client
            case .daemon: .daemon
            }
        }
    }

    public struct Hold: Sendable, Equatable {
        public var holder: Holder
        public var pid: Int32?
        public var uid: UInt32?
        /// When it registered, ms since the Unix epoch.
        public var sinceMillis: Int64

        public init(holder: Holder, pid: Int32?, uid: UInt32?, sinceMillis: Int64) {
            self.holder = holder
            self.pid = pid
            self.uid = uid
            self.sinceMillis = sinceMillis
        }
    }

    public struct Entry: Sendable, Equatable {
        public var key: String
        public var payload: Payload
        public var onUnstick: String?
        public var holds: [Hold]
        /// When the key was first registered, ms since the Unix epoch.
        public var sinceMillis: Int64
        /// Registration order: the order of the sends after every open.
        var order: UInt64

        /// What the key costs against `local.sticky_bytes`: key, text and leave text.
        public var bytes: Int { self.key.utf8.count + self.payload.byteCount + (self.onUnstick?.utf8.count ?? 0) }
    }

    public struct Limits: Sendable, Equatable {
        public var keysPerClient: Int
        public var keys: Int
        public var bytes: Int

        public init(keysPerClient: Int, keys: Int, bytes: Int) {
            self.keysPerClient = keysPerClient
            self.keys = keys
            self.bytes = bytes
        }
    }

    /// What a registration did: `added` and `replaced` mean the text is due upstream.
    public enum Registered: Sendable, Equatable {
        case added, replaced, joined, unchanged

        public var sends: Bool { self == .added || self == .replaced }
    }

    public enum RegisterError: Error, Sendable, Equatable {
        /// The key is held by another holder with a different text.
        case conflict(Hold)
        case tooManyForClient(limit: Int)
        case tooManyKeys(limit: Int)
        case tooManyBytes(limit: Int, used: Int, needed: Int)
    }

    public enum Released: Sendable, Equatable {
        /// Other holders keep the key.
        case stillHeld(holders: Int)
        /// The key went; `leave` is due upstream (nil: none).
        case removed(leave: String?)
    }

    public enum ReleaseError: Error, Sendable, Equatable {
        case unknownKey
        /// The key is held, but not by this client nor by the daemon (for the scope asked).
        case notHolder(Hold)
    }

    public var limits: Limits
    /// Bumped whenever what the daemon-scope keys hold changes (a key gains or loses its daemon
    /// hold, or such a key's text or leave text changes): the store writes its file only then.
    public private(set) var daemonRevision: UInt64 = 0
    private var entries: [String: Entry] = [:]
    private var heldByClient: [Int: Int] = [:]
    private var nextOrder: UInt64 = 0
    public private(set) var bytes = 0

    public init(limits: Limits) {
        self.limits = limits
    }

    public var count: Int { self.entries.count }
    public var isEmpty: Bool { self.entries.isEmpty }

    /// Every key, in registration order.
    public var ordered: [Entry] { self.entries.values.sorted { $0.order < $1.order } }

    /// The keys with a daemon hold, in registration order: what the spool directory keeps.
    public var daemonScoped: [Entry] { self.ordered.filter { $0.holds.contains { $0.holder == .daemon } } }

    public func entry(_ key: String) -> Entry? { self.entries[key] }

    public func keys(heldBy client: Int) -> Int { self.heldByClient[client] ?? 0 }

    /// Registers (or re-registers) `key` for a holder. A later `on_unstick` replaces an earlier one.
    public mutating func register(
        key: String, payload: Payload, onUnstick: String?, holder: Holder, pid: Int32?, uid: UInt32?, nowMillis: Int64
    ) -> Result<(Registered, holders: Int), RegisterError> {
        let before = self.daemonPart(of: key)
        let result = self.insert(key: key, payload: payload, onUnstick: onUnstick, holder: holder, pid: pid, uid: uid, nowMillis: nowMillis)
        if self.daemonPart(of: key) != before { self.daemonRevision += 1 }
        return result
    }

    private mutating func insert(
        key: String, payload: Payload, onUnstick: String?, holder: Holder, pid: Int32?, uid: UInt32?, nowMillis: Int64
    ) -> Result<(Registered, holders: Int), RegisterError> {
        let hold = Hold(holder: holder, pid: pid, uid: uid, sinceMillis: nowMillis)
        guard var entry = self.entries[key] else {
            if case .client(let id) = holder, self.keys(heldBy: id) >= self.limits.keysPerClient {
                return .failure(.tooManyForClient(limit: self.limits.keysPerClient))
            }
            guard self.entries.count < self.limits.keys else { return .failure(.tooManyKeys(limit: self.limits.keys)) }
            let entry = Entry(key: key, payload: payload, onUnstick: onUnstick, holds: [hold], sinceMillis: nowMillis, order: self.nextOrder)
            guard self.bytes + entry.bytes <= self.limits.bytes else {
                return .failure(.tooManyBytes(limit: self.limits.bytes, used: self.bytes, needed: entry.bytes))
            }
            self.nextOrder += 1
            self.entries[key] = entry
            self.bytes += entry.bytes
            self.adjust(holder, by: 1)
            return .success((.added, 1))
        }
        let holdsIt = entry.holds.contains { $0.holder == holder }
        if entry.payload != payload {
            // Only the key's one holder may change its text.
            if let other = entry.holds.first(where: { $0.holder != holder }) { return .failure(.conflict(other)) }
        } else if !holdsIt, case .client(let id) = holder, self.keys(heldBy: id) >= self.limits.keysPerClient {
            return .failure(.tooManyForClient(limit: self.limits.keysPerClient))
        }
        let before = entry.bytes
        let replaced = entry.payload != payload
        entry.payload = payload
        if let onUnstick { entry.onUnstick = onUnstick }
        guard self.bytes - before + entry.bytes <= self.limits.bytes else {
            return .failure(.tooManyBytes(limit: self.limits.bytes, used: self.bytes - before, needed: entry.bytes))
        }
        if !holdsIt {
            entry.holds.append(hold)
            self.adjust(holder, by: 1)
        }
        self.bytes += entry.bytes - before
        self.entries[key] = entry
        return .success((replaced ? .replaced : holdsIt ? .unchanged : .joined, entry.holds.count))
    }

    /// Lets go of `key`: this client's hold (scope nil or client), else the daemon's (scope nil
    /// or daemon). `leave` overrides the key's `on_unstick` when the key goes.
    public mutating func release(key: String, client: Int, scope: StickyScope?, leave: String?) -> Result<Released, ReleaseError> {
        let before = self.daemonPart(of: key)
        let result = self.remove(key: key, client: client, scope: scope, leave: leave)
        if self.daemonPart(of: key) != before { self.daemonRevision += 1 }
        return result
    }

    private mutating func remove(key: String, client: Int, scope: StickyScope?, leave: String?) -> Result<Released, ReleaseError> {
        guard var entry = self.entries[key] else { return .failure(.unknownKey) }
        let candidates: [Holder]
        switch scope {
        case .client?: candidates = [.client(client)]
        case .daemon?: candidates = [.daemon]
        case nil: candidates = [.client(client), .daemon]
        }
        guard let holder = candidates.first(where: { h in entry.holds.contains { $0.holder == h } }) else {
            return .failure(.notHolder(entry.holds[0]))
        }
        entry.holds.removeAll { $0.holder == holder }
        self.adjust(holder, by: -1)
        if entry.holds.isEmpty {
            self.entries[key] = nil
            self.bytes -= entry.bytes
            return .success(.removed(leave: leave ?? entry.onUnstick))
        }
        self.entries[key] = entry
        return .success(.stillHeld(holders: entry.holds.count))
    }

    /// A client went: its holds end. Returns the keys that went with them, in registration
    /// order, each with its leave text.
    public mutating func clientGone(_ client: Int) -> [(key: String, leave: String?)] {
        guard self.keys(heldBy: client) > 0 else { return [] }
        var gone: [(key: String, leave: String?)] = []
        for entry in self.ordered where entry.holds.contains(where: { $0.holder == .client(client) }) {
            if case .success(.removed(let leave)) = self.release(key: entry.key, client: client, scope: .client, leave: nil) {
                gone.append((entry.key, leave))
            }
        }
        return gone
    }

    /// Keys kept from an earlier run (scope daemon), ahead of anything registered since.
    /// Bounds are not checked: what was accepted once is kept.
    public mutating func restore(_ restored: [Entry]) {
        for var entry in restored where self.entries[entry.key] == nil {
            entry.holds = entry.holds.filter { $0.holder == .daemon }
            guard !entry.holds.isEmpty else { continue }
            entry.order = self.nextOrder
            self.nextOrder += 1
            self.entries[entry.key] = entry
            self.bytes += entry.bytes
        }
    }

    /// What the daemon-scope file keeps of `key`: its text, leave text and daemon hold, or nil
    /// when the daemon does not hold it.
    private func daemonPart(of key: String) -> DaemonPart? {
        guard let entry = self.entries[key], let hold = entry.holds.first(where: { $0.holder == .daemon }) else { return nil }
        return DaemonPart(payload: entry.payload, onUnstick: entry.onUnstick, hold: hold)
    }

    private struct DaemonPart: Equatable {
        var payload: Payload
        var onUnstick: String?
        var hold: Hold
    }

    private mutating func adjust(_ holder: Holder, by delta: Int) {
        guard case .client(let id) = holder else { return }
        let n = (self.heldByClient[id] ?? 0) + delta
        self.heldByClient[id] = n > 0 ? n : nil
    }
}

extension StickyRegistry.Entry {
    /// A daemon-scope key as read back from the spool directory.
    public static func restored(key: String, payload: Payload, onUnstick: String?, pid: Int32?, uid: UInt32?, sinceMillis: Int64) -> Self {
        Self(
            key: key, payload: payload, onUnstick: onUnstick, holds: [.init(holder: .daemon, pid: pid, uid: uid, sinceMillis: sinceMillis)],
            sinceMillis: sinceMillis, order: 0)
    }
}
