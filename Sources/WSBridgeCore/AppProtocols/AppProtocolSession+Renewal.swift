import WSBridgeProtocol

/// A renewal with a protocol (`upstream.max_lifetime`, `upstream.renew_when` with
/// `upstream.protocol`, docs/protocols.md): while the new connection is restored beside the old,
/// it runs a session of its own, a copy of the current one (the same subscriptions and holders,
/// fresh ids on the wire) that mirrors the apps' subscribes and ends until it takes over; then it
/// is the current one, and the old one's stays for the answers still due on the old connection.
extension AppProtocolSession {
    /// The renewal's second session: the subscriptions, their holders and the ids apps were
    /// given, as this one has them; nothing sent on its connection yet (its `opened()` sends them
    /// all, with ids from the other half of this session's range, so that no id of one is ever
    /// one of the other's while both run: NATS delivers a reply to the daemon's inbox on both);
    /// no calls (they are answered on the old connection); every holder counted as answered (the
    /// apps have their answers, or have them from the old connection).
    package func forRenewal() -> AppProtocolSession {
        var copy = self
        copy.isOpen = false
        copy.acknowledgement = nil
        copy.partial.removeAll()
        copy.restore.reset()
        _ = copy.ids.takeCalls()
        copy.blame.sent(nil)
        copy.table.markAnswered()
        copy.mirrors = true
        let half: UInt64 = 1 << 39
        copy.nextID = self.nextID &- self.idBase >= half ? self.idBase : self.idBase + half
        return copy
    }

    /// An app's message on the renewal's second session, which mirrors the current one until it
    /// takes over: a subscribe, or the end of a subscription it holds; what goes upstream on the
    /// new connection (apps are answered by the current session).
    package mutating func mirror(fromApp app: AppID, _ message: JSONValue) -> [Effect] {
        switch self.codec.classify(fromApp: message) {
        case .subscribe:
            break
        case .unsubscribe(_, let target):
            guard self.holdsSubscription(of: app, named: target) else { return [] }
        default:
            return []
        }
        return self.fromApp(app, message).filter(\.isUpstream)
    }

    /// A sticky subscription on the renewal's second session (as `mirror(fromApp:)`).
    package mutating func mirror(sticky app: AppID, _ message: JSONValue, key: String) -> [Effect] {
        guard self.codec.subscriptionID(inSticky: message) != nil else { return [] }
        return self.stickySubscribe(app, message, key: key).filter(\.isUpstream)
    }

    /// Whether `id` names a subscription `app` holds here (its own id, or the one apps were given).
    private func holdsSubscription(of app: AppID, named id: WireID) -> Bool {
        if case .subscription = self.ids.lookup(app, id) { return true }
        return self.table.key(visible: id) != nil
    }

    /// The renewal's second session takes over from `old`: it answers apps from now on, with the
    /// subscription ids apps were given on the old connection (a server's ids, JSON-RPC's: a
    /// subscription made during the overlap has the old connection's).
    package mutating func tookOver(from old: AppProtocolSession) {
        self.mirrors = false
        for subscription in old.table.all {
            guard let visible = subscription.visibleID else { continue }
            self.table.adopt(visible: visible, key: subscription.key)
        }
    }

    /// Whether an upstream message answers something an app waits for here: a call, or a
    /// subscribe not yet answered. After a renewal's takeover these are all the old connection
    /// still delivers (its events are the new one's now).
    package func answersWaiting(_ message: JSONValue) -> Bool {
        guard case .answer(let id, _) = self.codec.classify(fromUpstream: message) else { return false }
        if self.ids.call(id) != nil { return true }
        // A subscribe's answer that gives the server's id (JSON-RPC's), not yet given to its holders.
        guard let subscription = self.table[id], subscription.serverID == nil else { return false }
        return self.codec.serverSubscriptionID(in: message) != nil && subscription.holders.contains { !$0.answered }
    }

    /// Calls waiting for their answers (a renewal's old connection stays open for them).
    package var callsWaiting: Int { self.ids.callCount }
}

extension AppProtocolEffect {
    /// It goes upstream.
    package var isUpstream: Bool { if case .upstream = self { true } else { false } }

    /// It delivers to subscribers (every one, or an app).
    package var isDelivery: Bool {
        switch self {
        case .broadcast, .app: true
        default: false
        }
    }
}
