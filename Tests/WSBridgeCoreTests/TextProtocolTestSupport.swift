import Testing
import WSBridgeProtocol

@testable import WSBridgeCore

/// The text protocols (issue 34): their messages split and viewed, written back byte for byte,
/// and two apps on the same ids at once, as wire text in and out.
extension AppProtocolSession {
    /// The app's text as it would come through `send` (must be whole messages).
    mutating func app(_ app: AppID, _ text: String) -> [String] {
        guard case .success(let views) = self.codec.parse(app: text) else {
            Issue.record("not a message: \(text.debugDescription)")
            return []
        }
        return views.flatMap { self.wire(self.fromApp(app, $0)) }
    }

    /// The app's text as a sticky send under `key` (one whole message).
    mutating func sticky(_ app: AppID, _ text: String, key: String) -> [String] {
        guard case .success(let views) = self.codec.parse(app: text), views.count == 1 else {
            Issue.record("not one message: \(text.debugDescription)")
            return []
        }
        return self.wire(self.stickySubscribe(app, views[0], key: key))
    }

    /// What the upstream sent, as one WebSocket message.
    mutating func upstream(_ text: String) -> [String] {
        let split = Array(text.utf8).withUnsafeBytes { self.split(upstream: $0) }
        guard case .success(let messages) = split else {
            Issue.record("not the protocol: \(text.debugDescription): \(split)")
            return []
        }
        return messages.flatMap { self.wire(self.fromUpstream($0.view)) }
    }

    /// Effects as text: `up TEXT`, `app N TEXT`, `broadcast`, `refuse …`.
    func wire(_ effects: [AppProtocolEffect]) -> [String] {
        effects.map { effect in
            switch effect {
            case .upstream(let v): "up " + self.codec.wireText(v)
            case .app(let app, let v): "app \(app) " + self.codec.wireText(v)
            case .broadcast: "broadcast"
            case .refuse(let reason): "refuse " + reason
            case .ready: "ready"
            case .timing(let t): "timing send \(t.sendEvery ?? 0) \(t.text.debugDescription) deadline \(t.deadline ?? 0)"
            case .serverError(let text, let fatal): "error \(fatal ? "fatal " : "")\(text)"
            }
        }
    }
}
