import WSBridgeProtocol

/// What the protocol makes of an app's or the upstream's message, asked without changing the
/// session (the codec's reading).
extension AppProtocolSession {
    /// Why the protocol cannot read `message` as one of its apps' messages (nil: it can).
    package func invalidity(of message: JSONValue) -> String? {
        if case .invalid(let reason) = self.codec.classify(fromApp: message) { return reason }
        return nil
    }

    /// Whether an app's message subscribes or unsubscribes (what a hot standby mirrors).
    package func isSubscription(_ message: JSONValue) -> Bool {
        switch self.codec.classify(fromApp: message) {
        case .subscribe, .unsubscribe: true
        default: false
        }
    }

    /// The id an app's message expects answers under (a call's, a subscribe's, an unsubscribe's).
    package func requestID(in message: JSONValue) -> WireID? {
        switch self.codec.classify(fromApp: message) {
        case .call(let id), .subscribe(let id, _): id
        case .unsubscribe(let id, _): id
        default: nil
        }
    }

    /// The ids an upstream message answers, and whether it ends each.
    package func answerIDs(in message: JSONValue) -> [(id: WireID, final: Bool)] { self.codec.answerIDs(in: message) }

    /// Whether `app` uses `id` here (a call waiting, a subscription held), or apps were given
    /// `id` for a subscription here: where a message naming it belongs.
    package func knows(_ app: AppID, _ id: WireID) -> Bool {
        self.ids.lookup(app, id) != nil || self.table.key(visible: id) != nil
    }

    /// Whether the subscription `key` (the codec's key of a subscribe) is held here.
    package func holds(subscription key: String) -> Bool { self.table.find(key: key) != nil }

    /// The subscriptions held here, each weighed by `weight` of its message (set-aside ones too:
    /// an operator's clear sends them again here).
    package func subscriptionLoad(_ weight: (JSONValue) -> Int) -> Int {
        self.table.all.reduce(0) { $0 + weight($1.message) }
    }
}
