import WSBridgeCore
import WSBridgeProtocol

/// The application protocol's layers as the plane uses them: each connection's (one unless
/// `upstream.subscriptions_per_connection`; a fleet follower's stream with the bridge's layer),
/// an app's message going to the one it belongs to (`ProtocolMembers`).
extension LocalPlane {
    /// Every protocol layer, the first connection's first.
    var protocolLayers: [AppProtocolLayer] { self.protocolMembers?.protocolMembers.map(\.layer) ?? [] }

    /// The layer (and its connection) that `app`'s message `json` goes through.
    func protocolMember(for app: AppID, _ json: JSONValue, sticky key: String? = nil) -> Result<ProtocolMember, PoolFull> {
        guard let members = self.protocolMembers else { return .failure(PoolFull(description: "upstream.protocol is raw")) }
        return key.map { members.member(forSticky: $0, json) } ?? members.member(for: app, json)
    }

    /// Several messages from `app` (a local client's, or a fleet follower's app's; one `send`
    /// of a text protocol): in order, each through its layer, up to the first refused.
    func throughProtocol(_ app: AppID, _ views: [JSONValue]) -> AppProtocolLayer.Performed {
        let all = AppProtocolLayer.inOrder(views) { view in
            switch self.protocolMember(for: app, view) {
            case .failure(let full): AppProtocolLayer.Performed(refusal: full.description)
            case .success(let member): member.layer.fromApp(app, view, link: member.link)
            }
        }
        self.protocolMembers?.settle()
        return all
    }

    /// `app` went (a local client, or a fleet follower's app): what it held on every
    /// connection is let go.
    func protocolAppLeft(_ app: AppID) {
        guard let members = self.protocolMembers else { return }
        for member in members.protocolMembers { member.layer.appLeft(app, link: member.link) }
        members.settle()
    }

    /// The operator's `clear_set_aside`, on every connection: how many went again.
    func protocolClearSetAside() -> Int {
        self.protocolMembers?.protocolMembers.reduce(0) { $0 + $1.layer.clearSetAside(link: $1.link) } ?? 0
    }

    /// `holder` lets go of sticky subscription `key` where it is held: nil when no layer holds it.
    func protocolStickyRelease(_ holder: AppID, key: String) -> (AppProtocolLayer.Performed, holders: Int)? {
        guard let members = self.protocolMembers else { return nil }
        for member in members.protocolMembers {
            if let performed = member.layer.stickyRelease(holder, key: key, link: member.link) {
                let holders = member.layer.session.stickyHolders(key) ?? 0
                members.settle()
                return (performed, holders)
            }
        }
        return nil
    }
}
