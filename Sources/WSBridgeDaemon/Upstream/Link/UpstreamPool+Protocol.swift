import WSBridgeCore
import WSBridgeProtocol

/// A pool with `upstream.protocol`: each connection has its protocol layer (its own handshake,
/// ids and subscriptions, numbered from a range of its own), and an app's message goes to the
/// connection it belongs to. A subscribe goes where the same subscription is held already (two
/// apps, one upstream subscription), else to the first connection with room (the next one opened
/// when all are full); what names an id an app uses (an unsubscribe, a call with an id in use)
/// goes where that id is; everything else (calls, publishes, the app's own handshake and pings)
/// goes on the first open connection, whose layer answers it. Answers come back through the
/// layer that sent, to their app.
extension UpstreamPool {
    /// A connection with its protocol layer.
    struct Member {
        let layer: AppProtocolLayer
        let link: UpstreamLink
    }

    /// Every connection with its layer, the first first.
    var protocolMembers: [Member] { self.links.compactMap { link in self.layers[link.slot].map { Member(layer: $0, link: link) } } }

    /// The first open connection's (the first's when none is open).
    private var firstOpen: Member {
        let members = self.protocolMembers
        return members.first { $0.link.phase == .open } ?? members[0]
    }

    /// Where `app`'s message `json` goes, or why no connection can take it (a new subscription
    /// while every connection is full).
    func member(for app: AppID, _ json: JSONValue) -> Result<Member, PoolFull> {
        let members = self.protocolMembers
        guard let first = members.first else { return .failure(PoolFull(description: "bug: a pool with upstream.protocol has no protocol layer")) }
        switch first.layer.session.codec.classify(fromApp: json) {
        case .subscribe(let id, let key):
            if let there = members.first(where: { $0.layer.session.knows(app, id) || $0.layer.session.holds(subscription: key) }) {
                return .success(there)
            }
            return self.slot(forNew: self.weight(of: json), what: "this subscription").map { self.member(slot: $0, in: self.protocolMembers) }
        case .unsubscribe(_, let target):
            return .success(members.first { $0.layer.session.knows(app, target) } ?? self.firstOpen)
        case .call(let id):
            return .success(members.first { $0.layer.session.knows(app, id) } ?? self.firstOpen)
        default:
            return .success(self.firstOpen)
        }
    }

    /// Where the sticky subscription `key` (a sticky send with an id) goes: where it is held, else
    /// where there is room.
    func member(forSticky key: String, _ json: JSONValue) -> Result<Member, PoolFull> {
        let members = self.protocolMembers
        if let there = members.first(where: { $0.layer.session.stickyHolders(key) != nil }) { return .success(there) }
        return self.slot(forNew: self.weight(of: json), what: "this sticky subscription").map { self.member(slot: $0, in: self.protocolMembers) }
    }

    private func member(slot: Int, in members: [Member]) -> Member {
        members.first { $0.link.slot == slot } ?? members[0]
    }

    /// After apps' subscriptions ended: a connection left with none closes.
    func settle() {
        for link in self.links where link.slot != 0 { self.retireIfEmpty(link.slot) }
    }
}
