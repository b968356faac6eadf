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
extension UpstreamPool: ProtocolMembers {
    /// A connection with its layer, as the pool knows it.
    private struct Member {
        let layer: AppProtocolLayer
        let link: UpstreamLink
    }

    /// Every connection with its layer, the first first.
    private var members: [Member] { self.links.compactMap { link in self.layers[link.slot].map { Member(layer: $0, link: link) } } }

    var protocolMembers: [ProtocolMember] { self.members.map(self.member) }

    private func member(_ m: Member) -> ProtocolMember {
        ProtocolMember(layer: m.layer, link: m.link, connection: self.isPool ? m.link.slot + 1 : nil)
    }

    /// The first open connection's (the first's when none is open).
    private var firstOpen: Member {
        let members = self.members
        return members.first { $0.link.phase == .open } ?? members[0]
    }

    func member(for app: AppID, _ json: JSONValue) -> Result<ProtocolMember, PoolFull> {
        let members = self.members
        guard let first = members.first else { return .failure(PoolFull(description: "bug: a pool with upstream.protocol has no protocol layer")) }
        switch first.layer.session.codec.classify(fromApp: json) {
        case .subscribe(let id, let key):
            if let there = members.first(where: { $0.layer.session.knows(app, id) || $0.layer.session.holds(subscription: key) }) {
                return .success(self.member(there))
            }
            return self.slot(forNew: self.weight(of: json), what: "this subscription").map { self.member(slot: $0) }
        case .unsubscribe(_, let target):
            return .success(self.member(members.first { $0.layer.session.knows(app, target) } ?? self.firstOpen))
        case .call(let id):
            return .success(self.member(members.first { $0.layer.session.knows(app, id) } ?? self.firstOpen))
        default:
            return .success(self.member(self.firstOpen))
        }
    }

    func member(forSticky key: String, _ json: JSONValue) -> Result<ProtocolMember, PoolFull> {
        if let there = self.members.first(where: { $0.layer.session.stickyHolders(key) != nil }) { return .success(self.member(there)) }
        return self.slot(forNew: self.weight(of: json), what: "this sticky subscription").map { self.member(slot: $0) }
    }

    private func member(slot: Int) -> ProtocolMember {
        let members = self.members
        return self.member(members.first { $0.link.slot == slot } ?? members[0])
    }

    func settle() {
        for link in self.links where link.slot != 0 { self.retireIfEmpty(link.slot) }
    }
}
