import Logging
import NIOCore
import NIOWebSocket
import WSBridgeCore

/// The local WebSocket face (`[local.websocket]`, docs/websocket.md): its apps, what they may
/// do, and where their messages go. The listeners (`WebSocketFace+Listen`) hand it each
/// upgraded connection; the fan-out frames the upstream's messages to its apps. Confined to
/// the plane's event loop.
final class WebSocketFace {
    let limits: Configuration.Local.WebSocket
    let logger: Logger
    private let plane: LocalPlane
    /// The face's token (`local.websocket.token_file`); nil: none needed.
    let token: String?
    private var apps: [Int: WebSocketApp] = [:]
    private var nextID = 0
    /// Connections between their accept and their end (upgraded or not): what
    /// `local.websocket.max_clients` bounds.
    private(set) var connections = 0

    init(limits: Configuration.Local.WebSocket, token: String?, plane: LocalPlane, logger: Logger) {
        self.limits = limits
        self.token = token
        self.plane = plane
        self.logger = logger
    }

    var appCount: Int { self.apps.count }
    var allApps: Dictionary<Int, WebSocketApp>.Values { self.apps.values }

    /// A connection was accepted; false when the face is full (it is answered 503).
    func admit() -> Bool {
        guard self.connections < self.limits.maxClients else { return false }
        self.connections += 1
        return true
    }

    /// An accepted connection ended.
    func left() { self.connections -= 1 }

    /// An app for an upgraded connection.
    func makeApp(_ peer: WebSocketPeer, output: FrameOutput) -> WebSocketApp {
        self.nextID += 1
        let mayWrite = peer.hasToken || self.plane.mayWrite(peer.credentials, groups: peer.groups)
        return WebSocketApp(id: self.nextID, peer: peer, mayWrite: mayWrite, face: self, output: output, limits: self.plane.configuration.local)
    }

    func added(_ app: WebSocketApp) {
        self.apps[app.id] = app
        self.plane.fanout.flush()
        self.plane.fanout.frames.add(app)
        let uid = app.peer.credentials.map { "uid \($0.uid)" } ?? "unknown user"
        self.logger.info(
            "WebSocket app \(app.id) connected (\(app.peer.address), \(uid), \(app.peer.uri)\(app.mayWrite ? ", may send" : ", read-only"))",
            metadata: ["client.id": "\(app.id)"])
    }

    func removed(_ app: WebSocketApp) {
        guard self.apps.removeValue(forKey: app.id) != nil else { return }
        self.plane.fanout.frames.remove(app)
        self.logger.info("WebSocket app \(app.id) left", metadata: ["client.id": "\(app.id)"])
    }

    /// `message` upstream, as an NDJSON `send` goes (queued while the link is down, spooled when
    /// the spool is on); the refusal's text when it cannot go.
    func send(_ message: OutboundMessage, from app: WebSocketApp) -> String? {
        switch self.plane.link.send(message) {
        case .sent, .queued: return nil
        case .spooling(let stored):
            stored.assumeIsolated().whenSuccess { outcome in
                if case .rejected(let reason) = outcome { app.fail(WebSocketApp.tryAgainLater, reason) }
            }
            return nil
        case .rejected(let reason): return reason
        }
    }

    /// Closes every app (the daemon stops): 1001, going away.
    func closeAll() {
        for app in self.apps.values { app.close(.goingAway, reason: "wsbridged is stopping") }
    }
}

@available(*, unavailable)
extension WebSocketFace: Sendable {}
