import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// A fleet follower's way to its bridge's protocol layer (docs/fleet.md): the follower's apps
/// are apps of the bridge's layer, which rewrites their ids, shares and restores their
/// subscriptions, and routes what is theirs back through the stream.
protocol RemoteProtocolApps: ProtocolTransport {
    /// App `app`'s message, as the wire carries it, to the bridge's layer.
    func fromApp(_ app: AppID, _ text: String) -> AppProtocolLayer.Performed
    /// App `app` went: the bridge's layer lets go of what it held.
    func appLeft(_ app: AppID)
    /// A sticky subscription `holder` holds under `key` (`AppID.everyone`: this follower's, for
    /// all its subscribers, held while it lives), kept by the bridge's layer.
    func sticky(_ holder: AppID, _ text: String, key: String) -> SendOutcome
    /// `holder` lets go of sticky `key`: nil when it holds none such at the bridge.
    func unstick(_ holder: AppID, key: String) -> SendOutcome?
}

/// On a fleet follower with `upstream.protocol`, the layer keeps no session of its own: its
/// apps' messages go to the bridge as they are (`fromApp`), and it hands its apps what the
/// bridge routed to them, answering their `request`s by id as on the bridge.
extension AppProtocolLayer {
    /// A message the bridge's layer routed to app `app` of this follower, at stream seq `seq`
    /// (the app's ids already its own).
    func routed(_ message: UpstreamMessage, to app: AppID, at seq: UInt64, link: any ProtocolTransport) {
        defer { self.fanout.skip(to: seq) }
        if app == AppID.everyone {
            // A daemon-scope sticky subscription's: for every subscriber here.
            self.fanout.publish(message, parsed: self.view(of: message), at: seq)
            return
        }
        guard self.fanout.client(app) != nil || self.fanout.frames.app(app) != nil, let view = self.view(of: message) else { return }
        // The app's line (or its request's reply) takes the seq.
        self.fanout.skip(to: seq - 1)
        self.perform([.app(app, view)], link: link, receivedAtMillis: message.receivedAtMillis, original: (view, message.data))
    }

    /// One of the protocol's messages (the bridge routes each on its own), as the layer reads it.
    private func view(of message: UpstreamMessage) -> JSONValue? {
        guard self.isText else { return try? JSONValue.parse(message.data.readableBytesView) }
        guard case .success(let messages) = message.data.withUnsafeReadableBytes({ self.session.split(upstream: $0) }) else { return nil }
        return messages.first?.view
    }
}
