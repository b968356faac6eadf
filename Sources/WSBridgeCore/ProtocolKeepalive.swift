/// The application protocol's keepalive on one connection, as its server set it (STOMP's
/// heart-beats, Socket.IO's ping interval): text the daemon sends on a timer, and a deadline
/// after which a silent server is a dead link, checked once per deadline (was any message heard
/// since the last check?), so that no timer is set per message. Pure, like the heartbeat: time is
/// passed in, and the driver arms one timer at the instant `next` returns.
package struct ProtocolKeepalive: Sendable, Equatable {
    package enum Decision: Sendable, Equatable {
        /// Send this text upstream now, then call `next` again.
        case send(String)
        /// Nothing to do until this instant.
        case wait(until: MonotonicInstant)
        /// Nothing was heard for a whole deadline: the link is dead, for the reason given.
        case dead(String)
    }

    /// The protocol's name, for what a dead link is reported as.
    package let name: String
    private let text: String
    private let sendEvery: Duration?
    private let deadline: Duration?
    private var nextSend: MonotonicInstant?
    private var nextCheck: MonotonicInstant?
    /// A message came since the last check.
    private var heard = true

    /// The keepalive `timing` sets, from `now`; nil when it sets neither a send nor a deadline.
    package init?(_ timing: AppProtocolTiming, name: String, now: MonotonicInstant) {
        let every = timing.sendEvery.flatMap { $0 > 0 ? Duration.milliseconds($0) : nil }
        let deadline = timing.deadline.flatMap { $0 > 0 ? Duration.milliseconds($0) : nil }
        guard every != nil || deadline != nil else { return nil }
        self.name = name
        self.text = timing.text
        self.sendEvery = every
        self.deadline = deadline
        self.nextSend = every.map { now + $0 }
        self.nextCheck = deadline.map { now + $0 }
    }

    /// A message came from the server.
    package mutating func heardFrom() { self.heard = true }

    /// What to do at `now`; `open`: the link is open (before it is, the sends are skipped, the
    /// deadline holds).
    package mutating func next(now: MonotonicInstant, open: Bool) -> Decision {
        if let check = self.nextCheck, let deadline = self.deadline, now >= check {
            guard self.heard else {
                let millis = deadline.components.seconds * 1000 + deadline.components.attoseconds / 1_000_000_000_000_000
                return .dead("\(self.name): nothing from the server for \(millis) ms, past the keepalive deadline the server set on this connection")
            }
            self.heard = false
            self.nextCheck = now + deadline
        }
        if let send = self.nextSend, let every = self.sendEvery, now >= send {
            self.nextSend = now + every
            if open { return .send(self.text) }
        }
        // One of the two is set (init), so there is always a next instant.
        let wake = [self.nextSend, self.nextCheck].compactMap { $0 }.min() ?? now
        return .wait(until: wake)
    }
}
