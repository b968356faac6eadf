import Foundation
import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// A bridge holds its followers' sticky keys (docs/fleet.md). Each follower tells its whole set
/// on every change and every second; the bridge registers each key for that follower (a holder of
/// its own, as a local app is: the key's text goes upstream when the key is new, and again after
/// every open) and lets go of the keys the set no longer has (the leave text goes when no one
/// holds the key any more). A follower not heard for `expiry` is gone: its keys go with it, as a
/// local app's go when it disconnects. Confined to the daemon's event loop.
final class FleetStickyHolders {
    private struct Held: Equatable {
        var payload: Payload
        var onUnstick: String?
    }

    private struct Follower {
        /// Its holder id in the session's registry: below every local client's.
        let id: Int
        var keys: [String: Held] = [:]
        var seen: NIODeadline
    }

    private let session: UpstreamSession
    private let link: any LinkControl
    private let eventLoop: any EventLoop
    private let logger: Logger
    private let expiry: TimeAmount
    private var followers: [String: Follower] = [:]
    private var nextID = -1_000_000
    private var timer: Scheduled<Void>?

    /// This bridge's upstream.protocol (nil: raw): a follower's must be the same.
    private let protocolName: String?
    private var refused: Set<String> = []

    init(
        session: UpstreamSession, link: any LinkControl, protocol name: String? = nil, eventLoop: any EventLoop, logger: Logger,
        expiry: TimeAmount = .seconds(5)
    ) {
        self.protocolName = name
        self.session = session
        self.link = link
        self.eventLoop = eventLoop
        self.logger = logger
        self.expiry = expiry
        self.check()
    }

    /// The holders of followers not heard for `expiry`, once a second.
    private func check() {
        self.timer = self.eventLoop.assumeIsolated().scheduleTask(in: .seconds(1)) {
            let now = NIODeadline.now()
            for (name, follower) in self.followers where follower.seen + self.expiry < now {
                self.logger.warning(
                    "fleet: follower \(name) not heard for \(self.expiry.nanoseconds / 1_000_000_000) s: its \(follower.keys.count) sticky key(s) go")
                self.followers[name] = nil
                for (key, leave) in self.session.clientGone(follower.id) {
                    if let leave { _ = self.link.sendAhead(leave, key: key) }
                    self.link.released(key: key)
                }
            }
            self.check()
        }
    }

    func stop() { self.timer?.cancel() }

    /// Follower `name`'s set (a JSON array of `{"key", "text" | "binary", "on_unstick"}`);
    /// `protocol`: its upstream.protocol (nil: raw).
    func apply(_ name: String, _ data: ByteBuffer, protocol theirs: String? = nil) {
        guard theirs == self.protocolName else {
            if self.refused.insert(name).inserted {
                self.logger.warning(
                    "fleet: follower \(name) runs upstream.protocol = \(theirs ?? "raw"), this bridge \(self.protocolName ?? "raw"): its sticky keys are not held; set the same upstream.protocol on both"
                )
            }
            return
        }
        guard let json = try? JSONValue.parse(data.readableBytesView), case .array(let items) = json else {
            self.logger.warning("fleet: follower \(name)'s sticky set could not be read; ignored")
            return
        }
        var follower = self.followers[name] ?? Follower(id: self.nextID, seen: .now())
        if self.followers[name] == nil { self.nextID -= 1 }
        follower.seen = .now()
        var now: [String: Held] = [:]
        for item in items {
            guard case .string(let key)? = item["key"] else { continue }
            let payload: Payload
            if case .string(let text)? = item["text"] {
                payload = .text(text)
            } else if case .string(let encoded)? = item["binary"], let bytes = Data(base64Encoded: encoded) {
                payload = .binary(Array(bytes))
            } else {
                continue
            }
            let leave = item["on_unstick"]?.stringValue
            now[key] = Held(payload: payload, onUnstick: leave)
            if follower.keys[key] == now[key] { continue }
            switch self.session.register(StickyOptions(key: key, onUnstick: leave), payload: payload, client: follower.id, pid: nil, uid: nil) {
            case .success(let (outcome, _)):
                if outcome.sends { _ = self.link.sendAhead(OutboundMessage(payload), key: key) }
            case .failure(let error):
                self.logger.warning("fleet: follower \(name)'s sticky key \(key) not held: \(error.message)")
                now[key] = nil
            }
        }
        for key in follower.keys.keys where now[key] == nil {
            guard case .success(.removed(let leave)) = self.session.release(key: key, client: follower.id, scope: nil, leave: nil) else { continue }
            if let leave { _ = self.link.sendAhead(OutboundMessage(.text(leave)), key: key) }
            self.link.released(key: key)
        }
        follower.keys = now
        self.followers[name] = follower
    }

    /// Followers heard from, and the keys held for them.
    var count: (followers: Int, keys: Int) { (self.followers.count, self.followers.values.reduce(0) { $0 + $1.keys.count }) }
}

@available(*, unavailable)
extension FleetStickyHolders: Sendable {}
