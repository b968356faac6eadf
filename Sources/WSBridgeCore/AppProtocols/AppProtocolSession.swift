import CWSBridgeBytes
import WSBridgeProtocol

/// The application protocol's connection state, owned by the daemon for every app that shares
/// the link (PgBouncer's model: each app believes it has the connection to itself).
///
/// Pure: messages in, effects out, no I/O. Each app's ids are rewritten to ids from one counter
/// that only rises (unique on the connection, whatever the apps chose), and what answers an id
/// goes to its app with the app's id restored. Subscriptions outlive the connection: they are
/// sent again on every open with fresh ids (a server-assigned id is mapped back to the one the
/// app first saw), identical ones go upstream once, and the last holder's leave ends them
/// upstream. The handshake and the keepalives are the daemon's: an app's own are answered here.
///
/// One type for every protocol: the codec (how a protocol's messages read and are rewritten) is
/// the part that differs, held as `any AppProtocolCodec`, so the daemon holds the session itself
/// and no protocol mirrors its members.
package struct AppProtocolSession {
    package typealias Effect = AppProtocolEffect

    package typealias Limits = AppProtocolLimits

    // Their own types (a session was once generic over its codec, and nested types would have
    // been too, their metadata looked up at run time for every message).
    typealias Holder = AppProtocolSessionHolder
    typealias Subscription = AppProtocolSessionSubscription
    typealias Call = AppProtocolSessionCall
    typealias Held = AppProtocolSessionHeld

    package let codec: any AppProtocolCodec
    package let limits: Limits
    package var name: String { self.codec.name }
    private var nextID: UInt64 = 0
    private var calls: [WireID: Call] = [:]
    private var subscriptions: [WireID: Subscription] = [:]
    private var byKey: [String: WireID] = [:]
    private var byServerID: [WireID: WireID] = [:]
    /// Each app's ids in use, so that an app's message never scans the other apps' entries.
    private var held: [AppID: [WireID: Held]] = [:]
    /// JSON-RPC: the subscription id apps were given → the subscription's key.
    private var byVisibleID: [WireID: String] = [:]
    /// What the server acknowledged the handshake with, for apps' own handshakes.
    private var acknowledgement: JSONValue?
    package private(set) var isOpen = false
    package var now: Int64 = 0
    /// The key of the subscription sent last on the open link (nil: a call
    /// went after it, its answers or events came, or nothing): what a close right after open is
    /// laid at (a subscription the server answered did not make it close).
    private var lastSent: String?
    /// Closes right after open laid at each subscription, in a row.
    private var strikes: [String: Int] = [:]
    package private(set) var culprit: String?
    /// Bytes of the subscription messages kept (`limits.subscriptionBytes`).
    package private(set) var subscriptionBytes = 0

    /// `"KEY"` for each of the codec's routing keys, as bytes (nil: every message is read).
    private let needles: [[UInt8]]?
    /// Text protocols: the start of a message the last WebSocket message cut (`limits.messageBytes`).
    private var partial = AppProtocolTextRemainder()

    package init(codec: any AppProtocolCodec, limits: Limits = Limits()) {
        self.codec = codec
        self.limits = limits
        self.needles = codec.routingKeys.map { keys in keys.map { Array("\"\($0)\"".utf8) } }
    }

    package func mayRoute(_ text: UnsafeRawBufferPointer) -> Bool {
        guard let needles = self.needles else { return true }
        return RoutingKeys.mayRoute(text, needles: needles)
    }

    package var routingNeedles: [[UInt8]]? { self.needles }

    // MARK: - Text

    package var isText: Bool { self.codec.isText }

    /// Text protocols: the whole messages in what the upstream sent, after what an earlier
    /// WebSocket message left unfinished (kept for the next).
    package mutating func split(upstream bytes: UnsafeRawBufferPointer) -> Result<[AppProtocolMessage], AppProtocolSyntaxError> {
        self.partial.split(bytes, codec: self.codec, limit: self.limits.messageBytes)
    }

    /// An app's text as the protocol's messages (their views), or why it is not.
    package func parse(app text: String) -> Result<[JSONValue], AppProtocolSyntaxError> { self.codec.parse(app: text) }

    package func wireText(_ view: JSONValue) -> String { self.codec.wireText(view) }

    /// Text protocols: whether a WebSocket message is one broadcast message, told from how it
    /// begins (nothing of an earlier one is pending).
    package func isBroadcast(_ bytes: UnsafeRawBufferPointer) -> Bool {
        self.partial.isEmpty && self.codec.broadcastPrefixes.contains { bytes.starts(with: $0) }
    }

    private mutating func allocate() -> WireID {
        self.nextID += 1
        return self.codec.wireID(self.nextID)
    }

    /// Calls and subscriptions `app` holds.
    package func held(by app: AppID) -> Int { self.held[app]?.count ?? 0 }

    private mutating func hold(_ app: AppID, _ id: WireID, _ what: Held) { self.held[app, default: [:]][id] = what }

    private mutating func release(_ app: AppID, _ id: WireID) {
        self.held[app]?[id] = nil
        if self.held[app]?.isEmpty == true { self.held[app] = nil }
    }

    package var count: Int { self.calls.count + self.subscriptions.count }

    // MARK: - Link events

    /// The link opened: every subscription goes again. The handshake has one path, the link's:
    /// the codec's `connection` makes it the first opening message and its acknowledgement the
    /// ready gate, so the link is open only once the server acknowledged it (`${token}` filled in
    /// at each connect), and the acknowledgement came before this.
    package mutating func opened() -> [Effect] {
        self.isOpen = true
        self.lastSent = nil
        self.partial.removeAll()
        return [.ready] + self.ready()
    }

    package mutating func lost(reason: String) -> [Effect] { self.lost(reason: reason, closedRightAfterOpen: nil) }

    /// The link dropped: every call waiting for an answer is told (its answer went with the
    /// link); subscriptions stay, to be sent again on the next open.
    package mutating func lost(reason: String, closedRightAfterOpen: String?) -> [Effect] {
        // Told once per connection (the link goes on through backingOff, connecting...).
        guard self.isOpen else { return [] }
        self.isOpen = false
        self.acknowledgement = nil
        self.partial.removeAll()
        let waiting = self.calls.sorted { Self.older($0.key, $1.key) }.map(\.value)
        self.calls.removeAll()
        for call in waiting { self.release(call.app, call.appID) }
        // Subscribes still unanswered are answered when their new subscribe is.
        var effects: [Effect] = waiting.map { .app($0.app, self.codec.linkLostAnswer(id: $0.appID, reason: reason)) }
        if let closedRightAfterOpen {
            effects += self.strike(reason: closedRightAfterOpen)
        } else {
            self.strikes.removeAll()
        }
        self.lastSent = nil
        return effects
    }

    /// The server closed the link right after open: laid at the subscription sent last, which
    /// is set aside (its holders told) after `setAsideAfter` such opens in a row.
    private mutating func strike(reason: String) -> [Effect] {
        guard let key = self.lastSent, let upstream = self.byKey[key], var subscription = self.subscriptions[upstream] else { return [] }
        let count = self.strikes[key, default: 0] + 1
        self.strikes = [key: count]
        let holders = subscription.holders.map { "client \($0.app) as \($0.appID)" }.joined(separator: ", ")
        let text = String(subscription.message.serialized.prefix(200))
        self.culprit =
            "the server closed the link right after open \(count) time\(count == 1 ? "" : "s") in a row, the last message sent being \(text) (a subscription held by \(holders)): \(reason)"
        guard self.limits.setAsideAfter > 0, count >= self.limits.setAsideAfter else { return [] }
        self.strikes[key] = nil
        let why =
            "set aside: the server closed the link right after this subscription on \(count) opens in a row (\(reason)); it is not sent again until an operator runs `wsbridgectl subscriptions --clear`"
        subscription.setAside = why
        self.subscriptions[upstream] = subscription
        self.culprit = (self.culprit ?? "") + "; set aside"
        return subscription.holders.map { .app($0.app, self.codec.linkLostAnswer(id: $0.appID, reason: why)) }
    }

    /// Sends the set-aside subscriptions again: now if the link is ready, else at the next open.
    package mutating func clearSetAside() -> (count: Int, effects: [Effect]) {
        let aside = self.subscriptions.filter { $0.value.setAside != nil }.keys.sorted(by: Self.older)
        var effects: [Effect] = []
        for upstream in aside {
            guard var subscription = self.subscriptions.removeValue(forKey: upstream) else { continue }
            subscription.setAside = nil
            subscription.upstreamID = self.isOpen ? self.allocate() : upstream
            self.subscriptions[subscription.upstreamID] = subscription
            self.byKey[subscription.key] = subscription.upstreamID
            if self.isOpen {
                self.lastSent = subscription.key
                effects.append(.upstream(self.codec.replacingID(in: subscription.message, with: subscription.upstreamID)))
            }
        }
        if !aside.isEmpty { self.culprit = nil }
        return (aside.count, effects)
    }

    /// Ready: every live subscription goes upstream again, with fresh ids.
    private mutating func ready() -> [Effect] {
        var effects: [Effect] = []
        let live = self.subscriptions.values.sorted { Self.older($0.upstreamID, $1.upstreamID) }
        self.subscriptions.removeAll()
        self.byKey.removeAll()
        self.byServerID.removeAll()
        for var subscription in live {
            subscription.upstreamID = self.allocate()
            subscription.serverID = nil
            self.subscriptions[subscription.upstreamID] = subscription
            self.byKey[subscription.key] = subscription.upstreamID
            guard subscription.setAside == nil else { continue }
            self.lastSent = subscription.key
            effects.append(.upstream(self.codec.replacingID(in: subscription.message, with: subscription.upstreamID)))
        }
        return effects
    }

    /// Whether `a` was allocated before `b` (the counter only rises: shorter, then smaller).
    private static func older(_ a: WireID, _ b: WireID) -> Bool { (a.key.count, a.key) < (b.key.count, b.key) }

    // MARK: - Apps

    /// A message from `app`.
    package mutating func fromApp(_ app: AppID, _ message: JSONValue) -> [Effect] {
        switch self.codec.classify(fromApp: message) {
        case .invalid(let reason):
            return [.refuse(reason)]
        case .handshake:
            return [.app(app, self.codec.handshakeAnswer(acknowledgement: self.acknowledgement))]
        case .ping:
            return self.codec.pong(to: message).map { [.app(app, $0)] } ?? []
        case .swallow:
            return []
        case .other:
            return [.upstream(message)]
        case .call(let id):
            // Answered through a subscription of the app's own (its inbox): it goes as it is.
            if self.codec.callsMayBeCovered, let held = self.held[app],
                held.values.contains(where: { if case .subscription(let key) = $0 { self.codec.subscription(key, covers: id) } else { false } })
            {
                return [.upstream(message)]
            }
            if let refusal = self.refusal(for: app, id: id) { return [.refuse(refusal)] }
            let upstream = self.allocate()
            self.calls[upstream] = Call(app: app, appID: id)
            self.hold(app, id, .call(upstream))
            self.lastSent = nil
            return [.upstream(self.codec.replacingID(in: message, with: upstream))]
        case .subscribe(let id, let key):
            return self.withReceipt(app, message, self.subscribe(app, id: id, key: key, message: message))
        case .unsubscribe(let id, let target):
            return self.withReceipt(app, message, self.unsubscribe(app, id: id, target: target, message: message))
        }
    }

    /// `effects`, and the receipt the app's message asked for (unless it was refused).
    private func withReceipt(_ app: AppID, _ message: JSONValue, _ effects: [Effect]) -> [Effect] {
        guard let receipt = self.codec.receipt(for: message), !effects.contains(where: { if case .refuse = $0 { true } else { false } }) else { return effects }
        return effects + [.app(app, receipt)]
    }

    /// A sticky send that carries an id: a subscription held by `app` under `key`.
    package mutating func stickySubscribe(_ app: AppID, _ message: JSONValue, key: String) -> [Effect] {
        guard let id = self.codec.subscriptionID(inSticky: message) else { return self.fromApp(app, message) }
        return self.subscribe(app, id: id, key: Self.stickyKey(key), message: message)
    }

    /// `app` lets go of its sticky subscription `key`.
    package mutating func stickyRelease(_ app: AppID, key: String) -> [Effect]? {
        let held = Held.subscription(Self.stickyKey(key))
        guard let id = self.held[app]?.first(where: { $0.value == held })?.key else { return nil }
        return self.unsubscribe(app, id: nil, target: id, message: .null)
    }

    private static func stickyKey(_ key: String) -> String { "sticky " + key }

    /// How many hold the sticky subscription `key` (nil: the protocol layer has none).
    package func stickyHolders(_ key: String) -> Int? {
        self.byKey[Self.stickyKey(key)].flatMap { self.subscriptions[$0]?.holders.count }
    }

    package func requestID(in message: JSONValue) -> WireID? {
        switch self.codec.classify(fromApp: message) {
        case .call(let id), .subscribe(let id, _): id
        case .unsubscribe(let id, _): id
        default: nil
        }
    }

    package func answerIDs(in message: JSONValue) -> [(id: WireID, final: Bool)] { self.codec.answerIDs(in: message) }

    package mutating func forget(_ app: AppID, id: WireID) {
        guard case .call(let upstream) = self.held[app]?[id] else { return }
        self.calls[upstream] = nil
        self.release(app, id)
    }

    private mutating func subscribe(_ app: AppID, id: WireID, key: String, message: JSONValue) -> [Effect] {
        if let refusal = self.refusal(for: app, id: id) { return [.refuse(refusal)] }
        self.hold(app, id, .subscription(key))
        if let shared = self.byKey[key], var subscription = self.subscriptions[shared] {
            // The same subscription: held once more, sent no second time.
            let answered = subscription.visibleID != nil
            subscription.holders.append(Holder(app: app, appID: id, answered: answered))
            self.subscriptions[shared] = subscription
            guard answered, let visible = subscription.visibleID, let answer = self.codec.subscribeAnswer(id: id, subscription: visible) else {
                return []
            }
            return [.app(app, answer)]
        }
        let size = message.serialized.utf8.count
        if self.subscriptionBytes + size > self.limits.subscriptionBytes {
            self.release(app, id)
            return [
                .refuse(
                    "the subscriptions kept to send again on every open take \(self.subscriptionBytes) bytes, and this one's \(size) more would pass \(self.limits.subscriptionBytes) (protocol.max_subscription_bytes): end some, or raise it"
                )
            ]
        }
        self.subscriptionBytes += size
        let upstream = self.allocate()
        let subscription = Subscription(
            key: key, message: message, upstreamID: upstream, holders: [Holder(app: app, appID: id, answered: false)], since: self.now)
        self.subscriptions[upstream] = subscription
        self.byKey[key] = upstream
        guard self.isOpen else { return [] }
        self.lastSent = key
        return [.upstream(self.codec.replacingID(in: message, with: upstream))]
    }

    private func refusal(for app: AppID, id: WireID) -> String? {
        if self.held[app]?[id] != nil { return "id \(id) is already in use by this app: use another" }
        if self.held(by: app) >= self.limits.perApp {
            return "this app holds \(self.limits.perApp) calls and subscriptions already (protocol.max_per_app): end some first"
        }
        if self.count >= self.limits.total {
            return "\(self.limits.total) calls and subscriptions are open in all (protocol.max_total): wait, or end some"
        }
        return nil
    }

    private mutating func unsubscribe(_ app: AppID, id: WireID?, target: WireID, message: JSONValue) -> [Effect] {
        // The app names its subscription by its own id (graphql) or by the id it was given (JSON-RPC).
        let key: String
        switch self.held[app]?[target] {
        case .call(let upstream):
            // A call of this app's (a graphql query it completes early).
            self.calls[upstream] = nil
            self.release(app, target)
            return [.upstream(self.codec.replacingID(in: message, with: upstream))]
        case .subscription(let k):
            key = k
        case nil:
            guard let k = self.byVisibleID[target] else { return [.upstream(message)] }
            key = k
        }
        guard let upstream = self.byKey[key], var subscription = self.subscriptions[upstream],
            subscription.holders.contains(where: { $0.app == app })
        else { return [.upstream(message)] }
        let visible = subscription.visibleID
        let leaving = subscription.holders.filter { $0.app == app && ($0.appID == target || visible == target) }
        subscription.holders.removeAll { $0.app == app && ($0.appID == target || visible == target) }
        for holder in leaving { self.release(app, holder.appID) }
        if !subscription.holders.isEmpty {
            self.subscriptions[upstream] = subscription
            return id.flatMap { self.codec.unsubscribeAnswer(id: $0) }.map { [.app(app, $0)] } ?? []
        }
        self.remove(upstream)
        // A set-aside subscription is not on the server: nothing to end there.
        guard self.isOpen, subscription.setAside == nil else {
            return id.flatMap { self.codec.unsubscribeAnswer(id: $0) }.map { [.app(app, $0)] } ?? []
        }
        // The end goes upstream; its answer (if any) comes back to the app as a call's.
        let callID = self.allocate()
        guard let end = self.codec.endMessage(upstreamID: upstream, serverID: subscription.serverID, callID: callID) else { return [] }
        if let id {
            self.calls[callID] = Call(app: app, appID: id)
            self.hold(app, id, .call(callID))
        }
        return [.upstream(end)]
    }

    /// `app` went away: its calls are forgotten, its subscriptions let go (ended upstream when it
    /// was the last holder).
    package mutating func appLeft(_ app: AppID) -> [Effect] {
        guard let ids = self.held.removeValue(forKey: app) else { return [] }
        var effects: [Effect] = []
        var keys: [String] = []
        for what in ids.values {
            switch what {
            case .call(let upstream): self.calls[upstream] = nil
            case .subscription(let key): if !keys.contains(key) { keys.append(key) }
            }
        }
        for upstream in keys.compactMap({ self.byKey[$0] }).sorted(by: Self.older) {
            guard var subscription = self.subscriptions[upstream] else { continue }
            subscription.holders.removeAll { $0.app == app }
            if !subscription.holders.isEmpty {
                self.subscriptions[upstream] = subscription
                continue
            }
            self.remove(upstream)
            if self.isOpen, subscription.setAside == nil,
                let end = self.codec.endMessage(upstreamID: upstream, serverID: subscription.serverID, callID: self.allocate())
            {
                effects.append(.upstream(end))
            }
        }
        return effects
    }

    /// Ends subscription `upstream` here; its holders' ids are free again.
    private mutating func remove(_ upstream: WireID) {
        guard let subscription = self.subscriptions.removeValue(forKey: upstream) else { return }
        self.subscriptionBytes -= subscription.message.serialized.utf8.count
        self.byKey[subscription.key] = nil
        if let server = subscription.serverID { self.byServerID[server] = nil }
        if let visible = subscription.visibleID { self.byVisibleID[visible] = nil }
        for holder in subscription.holders { self.release(holder.app, holder.appID) }
    }

    // MARK: - Upstream

    /// A message from the upstream.
    package mutating func fromUpstream(_ message: JSONValue) -> [Effect] {
        switch self.codec.classify(fromUpstream: message) {
        case .broadcast:
            return [.broadcast]
        case .swallow:
            return []
        case .open:
            return self.codec.timing(in: message).map { [.timing($0)] } ?? []
        case .error(let text, let fatal):
            return [.broadcast, .serverError(text, fatal: fatal)]
        case .ping:
            return self.codec.pong(to: message).map { [.upstream($0)] } ?? []
        case .ack:
            // (Not `nil` in a conditional: JSONValue takes the nil literal as `.null`.)
            self.acknowledgement = message["payload"] != nil || self.codec.isText ? .some(message) : .none
            // The link's ready gate: it comes before `opened()`, which sends the subscriptions.
            return self.codec.timing(in: message).map { [.timing($0)] } ?? []
        case .event(let server):
            guard let upstream = self.byServerID[server], let subscription = self.subscriptions[upstream] else { return [.broadcast] }
            if self.lastSent == subscription.key { self.lastSent = nil }
            let visible = subscription.visibleID ?? server
            let event = self.codec.replacingSubscriptionID(in: message, with: visible)
            return subscription.holders.map { .app($0.app, event) }
        case .answer(let id, let final):
            if let call = self.calls[id] {
                if final {
                    self.calls[id] = nil
                    self.release(call.app, call.appID)
                }
                return [.app(call.app, self.codec.replacingID(in: message, with: call.appID))]
            }
            if let key = self.subscriptions[id]?.key, key == self.lastSent { self.lastSent = nil }
            guard var subscription = self.subscriptions[id] else {
                // An answer to an id of an earlier connection, or to an end nobody waits for
                // (or, for `json`, an id that is data).
                return self.codec.unknownAnswersBroadcast ? [.broadcast] : []
            }
            if let server = self.codec.serverSubscriptionID(in: message) {
                // A subscribe's answer: the server's id on this connection; apps keep the first.
                subscription.serverID = server
                if subscription.visibleID == nil {
                    subscription.visibleID = server
                    self.byVisibleID[server] = subscription.key
                }
                self.byServerID[server] = id
                let visible = subscription.visibleID ?? server
                var effects: [Effect] = []
                for i in subscription.holders.indices where !subscription.holders[i].answered {
                    subscription.holders[i].answered = true
                    let answer = self.codec.replacingSubscriptionID(in: message, with: visible)
                    effects.append(.app(subscription.holders[i].app, self.codec.replacingID(in: answer, with: subscription.holders[i].appID)))
                }
                self.subscriptions[id] = subscription
                return effects
            }
            let effects: [Effect] = subscription.holders.map { .app($0.app, self.codec.replacingID(in: message, with: $0.appID)) }
            if final && self.codec.answersEndSubscriptions { self.remove(id) }
            return effects
        }
    }

    // MARK: - Status

    /// The live subscriptions, oldest first.
    package var liveSubscriptions: [AppProtocolSubscriptionInfo] {
        self.subscriptions.values.sorted { Self.older($0.upstreamID, $1.upstreamID) }.map {
            AppProtocolSubscriptionInfo(
                key: $0.key, upstreamID: $0.upstreamID.key, holders: $0.holders.map { ($0.app, $0.appID.key) }, since: $0.since,
                setAside: $0.setAside)
        }
    }
}
