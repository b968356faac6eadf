import WSBridgeCore
import WSBridgeProtocol

/// The application protocol's layers as the plane uses them: the link's one, or with a pool
/// (`upstream.subscriptions_per_connection`) each connection's, an app's message going to the
/// one it belongs to (`UpstreamPool+Protocol`).
extension LocalPlane {
    /// Every protocol layer, the first connection's first.
    var protocolLayers: [AppProtocolLayer] {
        if let pool = self.protocolPool { return pool.protocolMembers.map(\.layer) }
        return self.appProtocol.map { [$0] } ?? []
    }

    /// The layer (and its connection) that `app`'s message `json` goes through.
    func protocolMember(for app: AppID, _ json: JSONValue, sticky key: String? = nil) -> Result<(AppProtocolLayer, any LinkControl), PoolFull> {
        guard let pool = self.protocolPool else { return .success((self.appProtocol!, self.link)) }
        let member = key.map { pool.member(forSticky: $0, json) } ?? pool.member(for: app, json)
        return member.map { ($0.layer, $0.link) }
    }

    /// Several messages from `app` (a local client's, or a fleet follower's app's; one `send`
    /// of a text protocol): in order, each through its layer, up to the first refused.
    func throughProtocol(_ app: AppID, _ views: [JSONValue]) -> AppProtocolLayer.Performed {
        guard let pool = self.protocolPool else { return self.appProtocol!.fromApp(app, views, link: self.link) }
        let all = AppProtocolLayer.inOrder(views) { view in
            switch self.protocolMember(for: app, view) {
            case .failure(let full): AppProtocolLayer.Performed(refusal: full.description)
            case .success(let (layer, link)): layer.fromApp(app, view, link: link)
            }
        }
        pool.settle()
        return all
    }

    /// `request`s waiting for a protocol answer: `client`'s, or everyone's.
    func protocolRequests(of client: LocalClient? = nil) -> Int {
        self.protocolLayers.reduce(0) { $0 + (client.map($1.requests.count(of:)) ?? $1.requests.count) }
    }

    /// `app` went (a local client, or a fleet follower's app): what it held on every
    /// connection is let go.
    func protocolAppLeft(_ app: AppID) {
        if let pool = self.protocolPool {
            for member in pool.protocolMembers { member.layer.appLeft(app, link: member.link) }
            pool.settle()
        } else {
            self.appProtocol?.appLeft(app, link: self.link)
        }
    }

    /// The operator's `clear_set_aside`, on every connection: how many went again.
    func protocolClearSetAside() -> Int {
        guard let pool = self.protocolPool else { return self.appProtocol?.clearSetAside(link: self.link) ?? 0 }
        return pool.protocolMembers.reduce(0) { $0 + $1.layer.clearSetAside(link: $1.link) }
    }

    /// `holder` lets go of sticky subscription `key` where it is held: nil when no layer holds it.
    func protocolStickyRelease(_ holder: AppID, key: String) -> (AppProtocolLayer.Performed, holders: Int)? {
        guard let pool = self.protocolPool else {
            guard let layer = self.appProtocol, let performed = layer.stickyRelease(holder, key: key, link: self.link) else { return nil }
            return (performed, layer.session.stickyHolders(key) ?? 0)
        }
        for member in pool.protocolMembers {
            if let performed = member.layer.stickyRelease(holder, key: key, link: member.link) {
                let holders = member.layer.session.stickyHolders(key) ?? 0
                pool.settle()
                return (performed, holders)
            }
        }
        return nil
    }
}
