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
    typealias Held = AppProtocolSessionHeld
    typealias Table = AppProtocolSubscriptionTable

    package let codec: any AppProtocolCodec
    package let limits: Limits
    package var name: String { self.codec.name }
    var nextID: UInt64 = 0
    /// The subscriptions, which outlive the connection, and their indexes.
    var table = Table() {
        didSet { self.routeVersion &+= 1 }
    }
    /// The calls waiting for answers and each app's ids in use.
    var ids = AppProtocolAppIDs() {
        didSet { self.routeVersion &+= 1 }
    }
    /// Counts every change to `table` and `ids` (what a scanned route depends on): a kept route
    /// (`keptRoute`) found at another count is found again.
    private(set) var routeVersion: UInt64 = 0
    /// The last scanned route that changed nothing (`route(scanned:in:)`).
    package internal(set) var keptRoute: AppProtocolKeptRoute?
    /// How many routes were kept (the last one's number).
    var keptRoutes: UInt64 = 0
    /// What the server acknowledged the handshake with, for apps' own handshakes.
    var acknowledgement: JSONValue?
    package internal(set) var isOpen = false
    package var now: Int64 = 0
    /// What a close right after open is laid at.
    var blame = AppProtocolBlame()
    /// The subscriptions that never worked, sent one at a time after an open.
    var restore = AppProtocolRestore()
    package var culprit: String? { self.blame.culprit }
    /// Bytes of the subscription messages kept (`limits.subscriptionBytes`).
    package var subscriptionBytes: Int { self.table.bytes }

    /// The codec's routing keys (nil: every message is read).
    package let routing: RoutingKeys?
    /// Where this session's ids start (a pool's connection's range); a renewal's second
    /// session numbers from the other half of it (`forRenewal`).
    var idBase: UInt64 = 0
    /// A renewal's second session, until it takes over: the current one answers apps, so
    /// holders it is given count as answered.
    var mirrors = false
    /// Text protocols: the start of a message the last WebSocket message cut (`limits.messageBytes`).
    var partial = AppProtocolTextRemainder()

    package init(codec: any AppProtocolCodec, limits: Limits = Limits()) {
        self.codec = codec
        self.limits = limits
        self.routing = RoutingKeys(codec.routingKeys)
    }

    // MARK: - Text (the codec reads an app's text and writes the wire's: `codec.parse(app:)`, `codec.wireText`)

    /// Text protocols: the whole messages in what the upstream sent, after what an earlier
    /// WebSocket message left unfinished (kept for the next).
    package mutating func split(upstream bytes: UnsafeRawBufferPointer) -> Result<[AppProtocolMessage], AppProtocolSyntaxError> {
        self.partial.split(bytes, codec: self.codec, limit: self.limits.messageBytes)
    }

    /// Ids from `n + 1` on: a pool's connections (`upstream.subscriptions_per_connection`) each
    /// number from their own range, so no two give out the same id (NATS delivers a reply to the
    /// daemon's inbox on every connection: only the one that asked knows the id).
    package mutating func numberIDs(after n: UInt64) {
        self.nextID = max(self.nextID, n)
        self.idBase = n
    }

    mutating func allocate() -> WireID {
        self.nextID += 1
        return self.codec.wireID(self.nextID)
    }

    /// Calls and subscriptions `app` holds.
    package func held(by app: AppID) -> Int { self.ids.count(of: app) }

    package var count: Int { self.ids.callCount + self.table.count }

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
            if self.codec.callsMayBeCovered,
                self.ids.holds(app, where: { if case .subscription(let key) = $0 { self.codec.subscription(key, covers: id) } else { false } })
            {
                return [.upstream(message)]
            }
            if let refusal = self.refusal(for: app, id: id) { return [.refuse(refusal)] }
            let upstream = self.allocate()
            self.ids.called(upstream, by: app, as: id)
            self.blame.sent(nil)
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
        // A call whose answer would end it (a Socket.IO emit with an ack id) is acknowledged
        // instead; where answers end nothing (json), every message with its id is its holders'.
        let call = if case .call = self.codec.classify(fromApp: message) { true } else { false }
        return self.subscribe(app, id: id, key: Self.stickyKey(key), message: message, stickyCall: call && self.codec.answersEndSubscriptions)
    }

    /// `app` lets go of its sticky subscription `key`.
    package mutating func stickyRelease(_ app: AppID, key: String) -> [Effect]? {
        let held = Held.subscription(Self.stickyKey(key))
        guard let id = self.ids.id(of: app, for: held) else { return nil }
        return self.unsubscribe(app, id: nil, target: id, message: .null)
    }

    private static func stickyKey(_ key: String) -> String { "sticky " + key }

    /// How many hold the sticky subscription `key` (nil: the protocol layer has none).
    package func stickyHolders(_ key: String) -> Int? {
        self.table.find(key: Self.stickyKey(key))?.subscription.holders.count
    }

    package mutating func forget(_ app: AppID, id: WireID) {
        guard case .call(let upstream) = self.ids.lookup(app, id) else { return }
        self.ids.endCall(upstream)
    }

    private mutating func subscribe(_ app: AppID, id: WireID, key: String, message: JSONValue, stickyCall: Bool = false) -> [Effect] {
        if let refusal = self.refusal(for: app, id: id) { return [.refuse(refusal)] }
        self.ids.hold(app, id, .subscription(key))
        if self.table.find(key: key)?.subscription.stickyCall == true {
            // A sticky call held once more: acknowledged as the first holder was, if it was.
            let answer = self.table.holdStickyCall(key, Holder(app: app, appID: id, answered: self.mirrors))
            if self.mirrors { return [] }
            return answer.map { [.app(app, self.codec.replacingID(in: $0, with: id))] } ?? []
        }
        if var subscription = self.table.find(key: key)?.subscription {
            // The same subscription: held once more, sent no second time.
            let answered = subscription.visibleID != nil
            subscription.holders.append(Holder(app: app, appID: id, answered: answered || self.mirrors))
            self.table.update(subscription)
            guard answered, let visible = subscription.visibleID, let answer = self.codec.subscribeAnswer(id: id, subscription: visible) else {
                return []
            }
            return [.app(app, answer)]
        }
        let size = message.serialized.utf8.count
        guard self.table.fits(size, limit: self.limits.subscriptionBytes) else {
            self.ids.release(app, id)
            return [
                .refuse(
                    "the subscriptions kept to send again on every open take \(self.subscriptionBytes) bytes, and this one's \(size) more would pass \(self.limits.subscriptionBytes) (protocol.max_subscription_bytes): end some, or raise it"
                )
            ]
        }
        let upstream = self.allocate()
        self.table.insert(
            Subscription(
                key: key, message: message, upstreamID: upstream, holders: [Holder(app: app, appID: id, answered: self.mirrors)], since: self.now,
                stickyCall: stickyCall, turn: self.codec.sharesInTurn(key: key) ? 0 : nil))
        guard self.isOpen else { return [] }
        if self.restore.isActive {
            // After the restore's, in its turn.
            self.restore.enqueue(upstream)
            return []
        }
        self.blame.sent(key)
        return [.upstream(self.codec.replacingID(in: message, with: upstream))]
    }

    private func refusal(for app: AppID, id: WireID) -> String? { self.ids.refusal(app, id, limits: self.limits, total: self.count) }

    private mutating func unsubscribe(_ app: AppID, id: WireID?, target: WireID, message: JSONValue) -> [Effect] {
        // The app names its subscription by its own id (graphql) or by the id it was given (JSON-RPC).
        let key: String
        switch self.ids.lookup(app, target) {
        case .call(let upstream):
            // A call of this app's (a graphql query it completes early).
            self.ids.endCall(upstream)
            return [.upstream(self.codec.replacingID(in: message, with: upstream))]
        case .subscription(let k):
            key = k
        case nil:
            guard let k = self.table.key(visible: target) else { return [.upstream(message)] }
            key = k
        }
        guard let (upstream, found) = self.table.find(key: key), found.holders.contains(where: { $0.app == app }) else { return [.upstream(message)] }
        var subscription = found
        let visible = subscription.visibleID
        let leaving = subscription.holders.filter { $0.app == app && ($0.appID == target || visible == target) }
        subscription.holders.removeAll { $0.app == app && ($0.appID == target || visible == target) }
        for holder in leaving { self.ids.release(app, holder.appID) }
        if !subscription.holders.isEmpty {
            self.table.update(subscription)
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
            self.ids.called(callID, by: app, as: id)
        }
        return [.upstream(end)]
    }

    /// `app` went away: its calls are forgotten, its subscriptions let go (ended upstream when it
    /// was the last holder).
    package mutating func appLeft(_ app: AppID) -> [Effect] {
        let keys = self.ids.removeApp(app)
        var effects: [Effect] = []
        for upstream in keys.compactMap({ self.table.upstreamID(key: $0) }).sorted(by: Table.older) {
            guard var subscription = self.table[upstream] else { continue }
            subscription.holders.removeAll { $0.app == app }
            if !subscription.holders.isEmpty {
                self.table.update(subscription)
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
        guard let subscription = self.table.remove(upstream) else { return }
        self.blame.acquit(subscription.key)
        for holder in subscription.holders { self.ids.release(holder.app, holder.appID) }
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
        case .refused(let key, let text):
            return [.broadcast, .serverError(text, fatal: false)] + self.setAside(key, because: "the server refused it (\(text))")
        case .ping:
            return self.codec.pong(to: message).map { [.upstream($0)] } ?? []
        case .ack:
            // (Not `nil` in a conditional: JSONValue takes the nil literal as `.null`.)
            self.acknowledgement = message["payload"] != nil || self.codec.isText ? .some(message) : .none
            // The link's ready gate: it comes before `opened()`, which sends the subscriptions.
            return self.codec.timing(in: message).map { [.timing($0)] } ?? []
        case .event(let server):
            guard let subscription = self.table.find(server: server) else { return [.broadcast] }
            let next = subscription.worked ? [] : self.worked(subscription.upstreamID)
            let visible = subscription.visibleID ?? server
            let event = self.codec.replacingSubscriptionID(in: message, with: visible)
            if subscription.turn != nil, let holder = self.table.takeTurn(subscription.upstreamID) { return [.app(holder.app, event)] + next }
            return subscription.holders.map { .app($0.app, event) } + next
        case .answer(let id, let final):
            if let call = self.ids.answer(id, final: final) {
                return [.app(call.app, self.codec.replacingID(in: message, with: call.appID))]
            }
            guard let subscription = self.table[id] else {
                // An answer to an id of an earlier connection, or to an end nobody waits for
                // (or, for `json`, an id that is data).
                return self.codec.unknownAnswersBroadcast ? [.broadcast] : []
            }
            let next = subscription.worked ? [] : self.worked(id)
            if let server = self.codec.serverSubscriptionID(in: message) {
                // A subscribe's answer: the server's id on this connection; apps keep the first.
                guard var subscription = self.table.answered(id, server: server) else { return next }
                let visible = subscription.visibleID ?? server
                var effects: [Effect] = []
                for i in subscription.holders.indices where !subscription.holders[i].answered {
                    subscription.holders[i].answered = true
                    let answer = self.codec.replacingSubscriptionID(in: message, with: visible)
                    effects.append(.app(subscription.holders[i].app, self.codec.replacingID(in: answer, with: subscription.holders[i].appID)))
                }
                self.table.update(subscription)
                return effects + next
            }
            if subscription.stickyCall {
                let due = self.table.answerStickyCall(id, with: message)
                return due.map { .app($0.app, self.codec.replacingID(in: message, with: $0.appID)) } + next
            }
            if subscription.turn != nil, let holder = self.table.takeTurn(id) {
                return [.app(holder.app, self.codec.replacingID(in: message, with: holder.appID))] + next
            }
            let effects: [Effect] = subscription.holders.map { .app($0.app, self.codec.replacingID(in: message, with: $0.appID)) }
            if final && self.codec.answersEndSubscriptions { self.remove(id) }
            return effects + next
        }
    }

    /// The live subscriptions, oldest first.
    package var liveSubscriptions: [AppProtocolSubscriptionInfo] { self.table.info }
}
