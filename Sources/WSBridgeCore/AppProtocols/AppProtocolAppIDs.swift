import WSBridgeProtocol

/// What each app's ids stand for while the session holds them: the calls waiting for their
/// answer (by the session's id on the connection, which the answer carries) and, for each app,
/// its ids in use (a call's, or a subscription's key), so that an app's message never scans the
/// other apps' entries. The two change together, only through these methods.
struct AppProtocolAppIDs {
    typealias Call = AppProtocolSessionCall
    typealias Held = AppProtocolSessionHeld

    private var calls = AppProtocolCallTable()
    private var held: [AppID: [WireID: Held]] = [:]

    var callCount: Int { self.calls.count }

    /// How many ids `app` holds.
    func count(of app: AppID) -> Int { self.held[app]?.count ?? 0 }

    /// What `app`'s id `id` stands for.
    func lookup(_ app: AppID, _ id: WireID) -> Held? { self.held[app]?[id] }

    /// Whether `app` holds an id for which `matches` is true.
    func holds(_ app: AppID, where matches: (Held) -> Bool) -> Bool { self.held[app]?.values.contains(where: matches) ?? false }

    /// Why `app` may not take id `id` now (nil: it may), with `total` calls and subscriptions open.
    func refusal(_ app: AppID, _ id: WireID, limits: AppProtocolLimits, total: Int) -> String? {
        if self.lookup(app, id) != nil { return "id \(id) is already in use by this app: use another" }
        if self.count(of: app) >= limits.perApp {
            return "this app holds \(limits.perApp) calls and subscriptions already (protocol.max_per_app): end some first"
        }
        if total >= limits.total {
            return "\(limits.total) calls and subscriptions are open in all (protocol.max_total): wait, or end some"
        }
        return nil
    }

    /// `app`'s id that stands for `what`.
    func id(of app: AppID, for what: Held) -> WireID? { self.held[app]?.first(where: { $0.value == what })?.key }

    /// The call the session sent as `upstream`.
    func call(_ upstream: WireID) -> Call? { self.calls.call(upstream) }

    mutating func hold(_ app: AppID, _ id: WireID, _ what: Held) { self.held[app, default: [:]][id] = what }

    mutating func release(_ app: AppID, _ id: WireID) {
        // The app's entry found once, changed in place by its index.
        guard let index = self.held.index(forKey: app) else { return }
        self.held.values[index][id] = nil
        if self.held.values[index].isEmpty { self.held.remove(at: index) }
    }

    /// `app`'s call `id` went upstream as `upstream`.
    mutating func called(_ upstream: WireID, by app: AppID, as id: WireID) {
        self.calls.insert(Call(app: app, appID: id, upstream: upstream))
        self.hold(app, id, .call(upstream))
    }

    /// The call an answer to `upstream` answers; a `final` one ends it (its app's id is free).
    mutating func answer(_ upstream: WireID, final: Bool) -> Call? {
        guard !self.calls.isEmpty else { return nil }
        guard final else { return self.calls.call(upstream) }
        guard let call = self.calls.remove(upstream) else { return nil }
        self.release(call.app, call.appID)
        return call
    }

    /// As `answer(_:final:)`, for an answer whose id a scan found (`text`, its bytes; `plain`:
    /// a text protocol's value): the call's app, and the id it knows the call by when that is
    /// not the one the answer carries (nil). Nil when it is not one of the calls kept by number:
    /// the caller reads the id and asks `answer(_:final:)`.
    mutating func answer(scanned text: UnsafeRawBufferPointer, plain: Bool, final: Bool) -> (app: AppID, appID: WireID?)? {
        let found = final ? self.calls.remove(scanned: text, plain: plain) : self.calls.call(scanned: text, plain: plain)
        guard let call = found else { return nil }
        if final { self.release(call.app, call.appID) }
        return (call.app, call.appID == call.upstream ? nil : call.appID)
    }

    /// The call sent as `upstream` is over (answered, ended, or forgotten): its app's id is free.
    mutating func endCall(_ upstream: WireID) { _ = self.answer(upstream, final: true) }

    /// Every call waiting, oldest first; none is left (the link that would answer them went).
    mutating func takeCalls() -> [Call] {
        let waiting = self.calls.all.sorted { AppProtocolSubscriptionTable.older($0.upstream, $1.upstream) }
        self.calls.removeAll()
        for call in waiting { self.release(call.app, call.appID) }
        return waiting
    }

    /// `app` went away: its calls are forgotten; returns the keys of the subscriptions it held.
    mutating func removeApp(_ app: AppID) -> [String] {
        guard let ids = self.held.removeValue(forKey: app) else { return [] }
        var keys: [String] = []
        for what in ids.values {
            switch what {
            case .call(let upstream): _ = self.calls.remove(upstream)
            case .subscription(let key): if !keys.contains(key) { keys.append(key) }
            }
        }
        return keys
    }
}
