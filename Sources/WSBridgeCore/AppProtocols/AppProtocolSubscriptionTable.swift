import WSBridgeProtocol

/// The session's subscriptions and the indexes that find one: by its id on the connection (the
/// session's own, renewed at every open), by its key (what makes two subscribes the same one), by
/// the server's id on this connection (what its events carry) and by the id apps were given first
/// (JSON-RPC's unsubscribe names that one); and the bytes of the subscribe messages kept. Every
/// change goes through these methods, so the indexes and the byte count never disagree with the
/// table.
struct AppProtocolSubscriptionTable {
    typealias Subscription = AppProtocolSessionSubscription

    private var byUpstream: [WireID: Subscription] = [:]
    private var byKey: [String: WireID] = [:]
    private var byServerID: [WireID: WireID] = [:]
    /// The subscription id apps were given → the subscription's key.
    private var byVisibleID: [WireID: String] = [:]
    /// Bytes of the subscription messages kept (`limits.subscriptionBytes`).
    private(set) var bytes = 0
    /// The first answer to each sticky call (by key), for the holders that come after it.
    private var callAnswers: [String: JSONValue] = [:]

    var count: Int { self.byUpstream.count }

    subscript(upstream: WireID) -> Subscription? { self.byUpstream[upstream] }

    /// The id on this connection of the subscription `key`.
    func upstreamID(key: String) -> WireID? { self.byKey[key] }

    /// The subscription `key` and its id on this connection.
    func find(key: String) -> (upstream: WireID, subscription: Subscription)? {
        guard let upstream = self.byKey[key], let subscription = self.byUpstream[upstream] else { return nil }
        return (upstream, subscription)
    }

    /// A queue group's next holder (`Subscription.turn`), its turn passed on.
    mutating func takeTurn(_ upstream: WireID) -> AppProtocolSessionHolder? {
        guard let subscription = self.byUpstream[upstream], let turn = subscription.turn, !subscription.holders.isEmpty else { return nil }
        let holder = subscription.holders[turn % subscription.holders.count]
        self.byUpstream[upstream]?.turn = (turn + 1) % subscription.holders.count
        return holder
    }

    /// The subscription whose events carry the server's id `server`.
    func find(server: WireID) -> Subscription? { self.byServerID[server].flatMap { self.byUpstream[$0] } }

    /// The key of the subscription apps know as `visible`.
    func key(visible: WireID) -> String? { self.byVisibleID[visible] }

    /// All of them, in no order (a sum over them needs none).
    var all: Dictionary<WireID, Subscription>.Values { self.byUpstream.values }

    /// All of them, oldest first.
    var oldestFirst: [Subscription] { self.byUpstream.values.sorted { Self.older($0.upstreamID, $1.upstreamID) } }

    /// All of them, oldest first, as `status` shows them.
    var info: [AppProtocolSubscriptionInfo] {
        self.oldestFirst.map {
            AppProtocolSubscriptionInfo(
                key: $0.key, upstreamID: $0.upstreamID.key, holders: $0.holders.map { ($0.app, $0.appID.key) }, since: $0.since,
                setAside: $0.setAside)
        }
    }

    /// The ids of those set aside, oldest first.
    var setAside: [WireID] { self.byUpstream.filter { $0.value.setAside != nil }.keys.sorted(by: Self.older) }

    /// Sets subscription `key` aside, `why` (not sent again until an operator clears it); it,
    /// or nil when there is none or it is aside already.
    mutating func setAside(key: String, why: String) -> Subscription? {
        guard let upstream = self.byKey[key], self.byUpstream[upstream]?.setAside == nil else { return nil }
        self.byUpstream[upstream]?.setAside = why
        return self.byUpstream[upstream]
    }

    /// Clears set-aside subscription `upstream`, now under the id `id`; it, or nil when there is none.
    mutating func clearSetAside(_ upstream: WireID, id: WireID) -> Subscription? {
        guard var subscription = self.byUpstream[upstream] else { return nil }
        subscription.setAside = nil
        subscription.upstreamID = id
        self.move(upstream, to: subscription)
        return subscription
    }

    /// Whether `size` more bytes would stay within `limit`.
    func fits(_ size: Int, limit: Int) -> Bool { self.bytes + size <= limit }

    /// The server answered subscription `upstream` or sent its first event (marked once: later
    /// messages cost the check of a flag). Returns its key.
    mutating func worked(_ upstream: WireID) -> String {
        self.byUpstream[upstream]?.worked = true
        return self.byUpstream[upstream]?.key ?? ""
    }

    /// The answer to sticky call `upstream`: the holders it is due to (not yet answered), now
    /// answered; the first answer is kept for later holders. On a later open: none.
    mutating func answerStickyCall(_ upstream: WireID, with answer: JSONValue) -> [AppProtocolSessionHolder] {
        guard var subscription = self.byUpstream[upstream] else { return [] }
        if self.callAnswers[subscription.key] == nil { self.callAnswers[subscription.key] = answer }
        var due: [AppProtocolSessionHolder] = []
        for i in subscription.holders.indices where !subscription.holders[i].answered {
            subscription.holders[i].answered = true
            due.append(subscription.holders[i])
        }
        self.byUpstream[upstream] = subscription
        return due
    }

    /// One more holder of sticky call `key`: the answer due to it now, if the call had one.
    mutating func holdStickyCall(_ key: String, _ holder: AppProtocolSessionHolder) -> JSONValue? {
        guard let upstream = self.byKey[key] else { return nil }
        let answer = self.callAnswers[key]
        var holder = holder
        holder.answered = answer != nil
        self.byUpstream[upstream]?.holders.append(holder)
        return answer
    }

    /// A new subscription.
    mutating func insert(_ subscription: Subscription) {
        self.bytes += subscription.message.serialized.utf8.count
        self.byUpstream[subscription.upstreamID] = subscription
        self.byKey[subscription.key] = subscription.upstreamID
    }

    /// Stores a changed subscription under its (unchanged) id.
    mutating func update(_ subscription: Subscription) {
        self.byUpstream[subscription.upstreamID] = subscription
    }

    /// Stores subscription `upstream` under the id it now has (`subscription.upstreamID`).
    mutating func move(_ upstream: WireID, to subscription: Subscription) {
        self.byUpstream[upstream] = nil
        self.byUpstream[subscription.upstreamID] = subscription
        self.byKey[subscription.key] = subscription.upstreamID
    }

    /// The link opened: each subscription, oldest first, takes the next of `ids` (one per
    /// subscription) and forgets the server's id of the last connection (the id apps were given
    /// stays). Returns them in that order.
    mutating func renumber(_ ids: [WireID]) -> [Subscription] {
        let live = self.oldestFirst
        precondition(ids.count == live.count, "one id per subscription")
        self.byUpstream.removeAll()
        self.byKey.removeAll()
        self.byServerID.removeAll()
        return zip(live, ids).map { old, id in
            var subscription = old
            subscription.upstreamID = id
            subscription.serverID = nil
            self.byUpstream[subscription.upstreamID] = subscription
            self.byKey[subscription.key] = subscription.upstreamID
            return subscription
        }
    }

    /// The server answered the subscribe of `upstream` with its id `server` on this connection;
    /// apps keep the first id they were given. Returns the subscription.
    mutating func answered(_ upstream: WireID, server: WireID) -> Subscription? {
        guard var subscription = self.byUpstream[upstream] else { return nil }
        subscription.serverID = server
        if subscription.visibleID == nil {
            subscription.visibleID = server
            self.byVisibleID[server] = subscription.key
        }
        self.byServerID[server] = upstream
        self.byUpstream[upstream] = subscription
        return subscription
    }

    /// Every holder counted as answered (a renewal's second session: apps have their answers).
    mutating func markAnswered() {
        for (upstream, subscription) in self.byUpstream where subscription.holders.contains(where: { !$0.answered }) {
            var answered = subscription
            for i in answered.holders.indices { answered.holders[i].answered = true }
            self.byUpstream[upstream] = answered
        }
    }

    /// Apps were given `visible` for subscription `key` (on another connection): it keeps that one.
    mutating func adopt(visible: WireID, key: String) {
        guard let upstream = self.byKey[key], var subscription = self.byUpstream[upstream], subscription.visibleID != visible else { return }
        if let old = subscription.visibleID { self.byVisibleID[old] = nil }
        subscription.visibleID = visible
        self.byVisibleID[visible] = key
        self.byUpstream[upstream] = subscription
    }

    /// Ends subscription `upstream`; returns it.
    @discardableResult
    mutating func remove(_ upstream: WireID) -> Subscription? {
        guard let subscription = self.byUpstream.removeValue(forKey: upstream) else { return nil }
        self.bytes -= subscription.message.serialized.utf8.count
        self.byKey[subscription.key] = nil
        self.callAnswers[subscription.key] = nil
        if let server = subscription.serverID { self.byServerID[server] = nil }
        if let visible = subscription.visibleID { self.byVisibleID[visible] = nil }
        return subscription
    }

    /// Whether `a` was allocated before `b` (the counter only rises: shorter, then smaller).
    static func older(_ a: WireID, _ b: WireID) -> Bool { (a.key.count, a.key) < (b.key.count, b.key) }
}
