import WSBridgeCore
import WSBridgeProtocol

/// A connection the application protocol runs on, with its layer; `connection`: its number in
/// `status` (from 1) when there are several (`upstream.subscriptions_per_connection`).
struct ProtocolMember {
    let layer: AppProtocolLayer
    let link: any LinkControl
    let connection: Int?
}

/// Where apps' protocol messages go (`upstream.protocol`): the pool's connections, each with its
/// layer (one connection unless `upstream.subscriptions_per_connection`), or a fleet follower's
/// stream with the bridge's layer. The plane asks it and nothing else; it never asks which.
protocol ProtocolMembers: AnyObject {
    /// Every connection with its layer, the first first.
    var protocolMembers: [ProtocolMember] { get }
    /// Where `app`'s message `json` goes, or why none can take it (every connection full).
    func member(for app: AppID, _ json: JSONValue) -> Result<ProtocolMember, PoolFull>
    /// Where the sticky subscription `key` goes: where it is held, else where there is room.
    func member(forSticky key: String, _ json: JSONValue) -> Result<ProtocolMember, PoolFull>
    /// After apps' subscriptions ended: a connection left with none closes.
    func settle()
}

/// A fleet follower's: one member, the stream, through the bridge's layer.
final class OneProtocolMember: ProtocolMembers {
    private let member: ProtocolMember

    init(layer: AppProtocolLayer, link: any LinkControl) {
        self.member = ProtocolMember(layer: layer, link: link, connection: nil)
    }

    var protocolMembers: [ProtocolMember] { [self.member] }
    func member(for app: AppID, _ json: JSONValue) -> Result<ProtocolMember, PoolFull> { .success(self.member) }
    func member(forSticky key: String, _ json: JSONValue) -> Result<ProtocolMember, PoolFull> { .success(self.member) }
    func settle() {}
}

@available(*, unavailable)
extension OneProtocolMember: Sendable {}
