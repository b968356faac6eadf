import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// The application protocol (`upstream.protocol`): what the protocol layer (`ProtocolSession`)
/// decides, carried out. Messages that belong to an app go to that app only, numbered in the
/// stream like every message but kept out of the replay ring and the journal (a new connection
/// owns nothing, so a replay of them would reach nobody's).
extension Fanout {
    /// A text message from the upstream, through the protocol layer: whether it goes on to every
    /// subscriber (a broadcast), as before.
    @inline(never)  // off the raw message path, which only tests `routing`
    func route(_ message: UpstreamMessage, link: any LinkControl) -> Bool {
        guard let json = try? JSONValue.parse(message.data.readableBytesView), var router = self.router else { return true }
        let effects = router.fromUpstream(json)
        self.router = router
        return self.perform(effects, link: link, receivedAtMillis: message.receivedAtMillis).broadcast
    }

    /// The link opened (the session re-established, the handshake acknowledged) or left `open`.
    func protocolLink(_ link: any LinkControl, changedTo phase: ConnectionPhase, reason: String) {
        guard var router = self.router else { return }
        let effects: [ProtocolEffect]
        if phase == .open {
            effects = router.opened()
        } else {
            effects = router.lost(reason: "the upstream link went \(phase.rawValue) (\(reason)) before the answer came")
        }
        self.router = router
        self.perform(effects, link: link, receivedAtMillis: WallClock.millisecondsSinceEpoch())
    }

    /// What happened to the messages the protocol layer sent upstream or refused.
    struct Performed {
        var broadcast = false
        /// The last upstream send's outcome (nil: nothing went upstream).
        var sent: SendOutcome?
        var refusal: String?
    }

    /// Carries out `effects`: upstream sends through the link, lines for one app each.
    @discardableResult
    func perform(_ effects: [ProtocolEffect], link: any LinkControl, receivedAtMillis: Int64) -> Performed {
        var performed = Performed()
        for effect in effects {
            switch effect {
            case .broadcast:
                performed.broadcast = true
            case .upstream(let json):
                performed.sent = link.submit(UpstreamMessage(.text(json.serialized)))
            case .app(let app, let json):
                guard let client = self.clients[app] else { continue }
                self.deliver(json, to: client, receivedAtMillis: receivedAtMillis)
            case .refuse(let reason):
                performed.refusal = reason
            case .ready:
                break
            }
        }
        return performed
    }

    /// A message from a local app (`send`), through the protocol layer.
    func fromApp(_ client: LocalClient, _ json: JSONValue, link: any LinkControl) -> Performed {
        guard var router = self.router else { return Performed() }
        let effects = router.fromApp(client.id, json)
        self.router = router
        return self.perform(effects, link: link, receivedAtMillis: WallClock.millisecondsSinceEpoch())
    }

    /// A local app went away: what it held is let go (ended upstream when it was the last holder).
    func appLeft(_ client: LocalClient, link: any LinkControl) {
        guard var router = self.router else { return }
        let effects = router.appLeft(client.id)
        self.router = router
        self.perform(effects, link: link, receivedAtMillis: WallClock.millisecondsSinceEpoch())
    }
}
