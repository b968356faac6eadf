import Logging
import NIOCore
import WSBridgeCore

/// With `upstream.protocol`, a bridge's protocol layer holds its followers' apps as apps of its
/// own (docs/fleet.md): each `holder/app` (the follower's name, the app's number there) gets an
/// `AppID` below every local client's and every follower's sticky holder, its messages go
/// through the layer as a local app's do (its ids rewritten, its subscriptions shared with
/// everyone's, restored after every open), and what the layer routes to it goes into the stream
/// for that follower only (`Wsbridge-To`). An app goes when its follower says so, or with its
/// follower when that is not heard for `expiry` (a follower tells its sticky set every second).
/// Confined to the daemon's event loop.
final class FleetRemoteApps {
    private var ids: [String: AppID] = [:]
    private var names: [AppID: String] = [:]
    /// Each follower's apps, and when it was last heard.
    private var followers: [String: (apps: Set<AppID>, seen: NIODeadline)] = [:]
    private var next: AppID = -2_000_000_000
    private let expiry: TimeAmount
    private var timer: Scheduled<Void>?
    /// An app went (`appLeft` on every protocol layer).
    var left: ((AppID) -> Void)?

    init(expiry: TimeAmount = .seconds(5)) {
        self.expiry = expiry
    }

    /// The app named `name` (`holder/app`), made on first use; nil for a name of another shape.
    /// Its follower is heard by it.
    func id(for name: String) -> AppID? {
        guard let slash = name.lastIndex(of: "/"), slash != name.startIndex, Int(name[name.index(after: slash)...]) != nil else { return nil }
        let holder = String(name[..<slash])
        if let id = self.ids[name] {
            self.followers[holder]?.seen = .now()
            return id
        }
        let id = self.next
        self.next -= 1
        self.ids[name] = id
        self.names[id] = name
        self.followers[holder, default: ([], .now())].apps.insert(id)
        self.followers[holder]?.seen = .now()
        return id
    }

    func name(of app: AppID) -> String? { self.names[app] }

    var count: Int { self.ids.count }

    /// Follower `holder` was heard (a send, its sticky set).
    func heard(_ holder: String) {
        guard self.followers[holder] != nil else { return }
        self.followers[holder]?.seen = .now()
    }

    /// App `name` went (its follower said so).
    func gone(_ name: String) {
        guard let id = self.ids.removeValue(forKey: name) else { return }
        self.names[id] = nil
        if let slash = name.lastIndex(of: "/") { self.followers[String(name[..<slash])]?.apps.remove(id) }
        self.left?(id)
    }

    /// Checks once a second for followers not heard for `expiry`: their apps go.
    func start(on eventLoop: any EventLoop, logger: Logger) {
        self.timer = eventLoop.assumeIsolated().scheduleTask(in: .seconds(1)) {
            let now = NIODeadline.now()
            for (holder, follower) in self.followers where follower.seen + self.expiry < now {
                self.followers[holder] = nil
                guard !follower.apps.isEmpty else { continue }
                logger.warning(
                    "fleet: follower \(holder) not heard for \(self.expiry.nanoseconds / 1_000_000_000) s: its \(follower.apps.count) app(s) go from upstream.protocol's subscriptions"
                )
                for id in follower.apps.sorted(by: >) {
                    if let name = self.names.removeValue(forKey: id) { self.ids[name] = nil }
                    self.left?(id)
                }
            }
            self.start(on: eventLoop, logger: logger)
        }
    }

    func stop() { self.timer?.cancel() }
}

@available(*, unavailable)
extension FleetRemoteApps: Sendable {}
