import WSBridgeProtocol

/// The link's events for the session: an open (every subscription sent again, those that worked
/// first, the others one at a time), a loss (calls answered, a close right after open laid at
/// what was sent and never confirmed), and what sets a subscription aside or clears it.
extension AppProtocolSession {
    /// The link opened: every subscription goes again. The handshake has one path, the link's:
    /// the codec's `connection` makes it the first opening message and its acknowledgement the
    /// ready gate, so the link is open only once the server acknowledged it (`${token}` filled in
    /// at each connect), and the acknowledgement came before this.
    package mutating func opened() -> [Effect] {
        self.isOpen = true
        self.blame.sent(nil)
        self.partial.removeAll()
        return [.ready] + self.ready()
    }

    package mutating func lost(reason: String) -> [Effect] { self.lost(reason: reason, closedRightAfterOpen: nil) }

    /// The link dropped: every call waiting is told (its answer went); subscriptions stay.
    package mutating func lost(reason: String, closedRightAfterOpen: String?) -> [Effect] {
        // Told once per connection (the link goes on through backingOff, connecting...).
        guard self.isOpen else { return [] }
        self.isOpen = false
        self.acknowledgement = nil
        self.partial.removeAll()
        self.restore.reset()
        let waiting = self.ids.takeCalls()
        // Subscribes still unanswered are answered when their new subscribe is.
        var effects: [Effect] = waiting.map { .app($0.app, self.codec.linkLostAnswer(id: $0.appID, reason: reason)) }
        let strike = self.blame.ended(rightAfterOpen: closedRightAfterOpen != nil)
        if let strike, let closedRightAfterOpen { effects += self.strike(strike.key, count: strike.count, reason: closedRightAfterOpen) }
        return effects
    }

    /// The server closed the link right after open: laid at the subscription sent last, which
    /// is set aside (its holders told) after `setAsideAfter` such opens in a row.
    mutating func strike(_ key: String, count: Int, reason: String) -> [Effect] {
        guard let subscription = self.table.find(key: key)?.subscription else { return [] }
        let holders = subscription.holders.map { "client \($0.app) as \($0.appID)" }.joined(separator: ", ")
        let text = String(subscription.message.serialized.prefix(200))
        self.blame.culprit =
            "the server closed the link right after open \(count) time\(count == 1 ? "" : "s") in a row, the last message sent being \(text) (a subscription held by \(holders)): \(reason)"
        guard self.limits.setAsideAfter > 0, count >= self.limits.setAsideAfter else { return [] }
        self.blame.culprit = (self.blame.culprit ?? "") + "; set aside"
        return self.setAside(key, because: "the server closed the link right after this subscription on \(count) opens in a row (\(reason))")
    }

    /// Subscription `key` is set aside, `why`: not sent again until an operator clears it, its
    /// holders told.
    mutating func setAside(_ key: String, because why: String) -> [Effect] {
        let reason = "set aside: \(why); it is not sent again until an operator runs `wsbridgectl subscriptions --clear`"
        guard let subscription = self.table.setAside(key: key, why: reason) else { return [] }
        self.blame.setAside(key)
        let told: [Effect] = subscription.holders.map { .app($0.app, self.codec.linkLostAnswer(id: $0.appID, reason: reason)) }
        return told + (self.restore.confirming == subscription.upstreamID ? self.restoreNext() : [])
    }

    /// Sends the set-aside subscriptions again: now if the link is ready, else at the next open.
    package mutating func clearSetAside() -> (count: Int, effects: [Effect]) {
        let aside = self.table.setAside
        var effects: [Effect] = []
        for upstream in aside {
            let id = self.isOpen ? self.allocate() : upstream
            guard let subscription = self.table.clearSetAside(upstream, id: id), self.isOpen else { continue }
            self.blame.sent(subscription.key)
            effects.append(.upstream(self.codec.replacingID(in: subscription.message, with: id)))
        }
        if !aside.isEmpty { self.blame.culprit = nil }
        return (aside.count, effects)
    }

    /// Ready: every live subscription goes again, fresh ids: those that worked before at once,
    /// then the others one at a time (`restore`).
    mutating func ready() -> [Effect] {
        let ids = (0..<self.table.count).map { _ in self.allocate() }
        let renumbered = self.table.renumber(ids).filter { $0.setAside == nil }
        var effects: [Effect] = renumbered.filter(\.worked).map { .upstream(self.codec.replacingID(in: $0.message, with: $0.upstreamID)) }
        self.restore.start(renumbered.filter { !$0.worked }.map(\.upstreamID))
        effects += self.restoreNext()
        return effects
    }

    /// The next subscription of the restore that is still held, sent (nothing when none is left).
    mutating func restoreNext() -> [Effect] {
        while let id = self.restore.advance() {
            guard let subscription = self.table[id], subscription.setAside == nil else { continue }
            self.blame.sent(subscription.key)
            return [.upstream(self.codec.replacingID(in: subscription.message, with: id))]
        }
        return []
    }

    /// The restore's step now (nil: none under way): the layer's timer waits this long for it.
    package var restoreStep: Int? { self.restore.isActive ? self.restore.step : nil }

    /// `protocol.confirm_timeout` passed with step `step` unconfirmed: the next goes.
    package mutating func confirmationTimedOut(step: Int) -> [Effect] {
        guard self.restore.isActive, self.restore.step == step else { return [] }
        return self.restoreNext()
    }

    /// Subscription `id` worked (answered, or its events came): acquitted; the restore's next
    /// goes if it was the one it waited for.
    mutating func worked(_ id: WireID) -> [Effect] {
        self.blame.acquit(self.table.worked(id))
        return self.restore.confirming == id ? self.restoreNext() : []
    }
}
