/// `fleet.standby`'s lease (docs/fleet.md), decided: which bridge of a stream leads, from what it
/// reads and writes in a JetStream key-value bucket. Pure: the driver (`FleetLease`) does the I/O
/// and passes the time in; this says what to do next and when the bridge starts or stops leading.
///
/// The rule is that a leader fails safe. It stands down only on proof that another bridge holds
/// the lease: another's name read at the key. A timeout, an error, NATS gone or the key missing
/// (expired while the bucket could not be written) never moves it: it keeps its link and its own
/// apps' feed, and writes the key again as soon as it can. A bridge that does not lead takes the
/// lease only after it has read the key absent, with the bucket answering, for a whole `grace`
/// (more than a leader needs to write it again after the bucket comes back), or at once when the
/// last leader released it (a clean stop writes an empty name). So after an outage of all of NATS
/// the bridge that led (and holds what NATS missed) writes its key again before any standby may
/// take it, and a standby takes over only from a leader that stayed away.
public struct FleetLeaseMachine: Sendable {
    /// What the driver saw when it did an action: its write went through, or (when it did not)
    /// what a read of the key then found.
    public enum Observation: Sendable, Equatable {
        /// This bridge's name is written at `revision`.
        case written(revision: UInt64)
        /// The key holds `holder` at `revision`; an empty name is a lease released by a clean stop.
        case held(by: String, revision: UInt64)
        /// No key (never made, expired, or deleted).
        case missing
        /// The bucket did not answer (NATS away, a timeout, an error): `why` in the client's words.
        case unreachable(String)
    }

    /// What to do now. Each write that does not go through is followed by a read of the key, and
    /// the outcome passed to `observed`.
    public enum Action: Sendable, Equatable {
        case none
        /// Writes this bridge's name expecting the key at `revision` (its own last write).
        case renew(revision: UInt64)
        /// Writes this bridge's name where the key is absent (`revision` nil: create) or released
        /// at `revision`.
        case take(revision: UInt64?)
        /// Reads who holds the key.
        case read
    }

    /// A change of role, for the driver to act on (open or close a cold standby's link).
    public enum Change: Sendable, Equatable {
        /// This bridge leads now; `previous`: the one it took over from, when known.
        case startedLeading(previous: String?)
        /// Another bridge holds the lease: `holder`.
        case stoppedLeading(holder: String)
    }

    public let holder: String
    /// How long a standby must read the key absent before it takes it.
    public let grace: Duration

    public private(set) var leading = false
    /// The revision this bridge last wrote (while leading).
    public private(set) var revision: UInt64?
    /// Leading, and its lease written (or read as its own) since NATS last came back: until then
    /// a cold leader publishes nothing, so a bridge that lost its lease while away cannot put
    /// what it held after another's takeover.
    public private(set) var confirmed = false
    /// Who holds the lease, as last read (nil: unknown; "" released).
    public private(set) var heldBy: String?
    /// When this bridge first read the key absent, with the bucket answering every read since.
    public private(set) var absentSince: MonotonicInstant?
    public private(set) var lastError: String?
    /// The last other bridge read holding the lease: the one a takeover follows.
    public private(set) var lastLeader: String?
    private var lastAction = Action.none

    public init(holder: String, grace: Duration) {
        self.holder = holder
        self.grace = grace
    }

    /// The periodic step (three times a lease): a leader renews, a standby reads, or takes the
    /// key when it may.
    public mutating func tick(now: MonotonicInstant) -> Action {
        let action: Action
        if self.leading {
            action = self.revision.map { .renew(revision: $0) } ?? .take(revision: nil)
        } else if let absent = self.absentSince, now - absent >= self.grace {
            action = .take(revision: nil)
        } else {
            action = .read
        }
        self.lastAction = action
        return action
    }

    /// NATS came back (or first came up): what a leader publishes waits until its lease is
    /// written again, and what a standby read before is stale.
    public mutating func reconnected() {
        self.confirmed = false
        self.absentSince = nil
    }

    /// The outcome of the last action: a change of role, if any, and what to do at once.
    public mutating func observed(_ observation: Observation, now: MonotonicInstant) -> (change: Change?, next: Action) {
        let last = self.lastAction
        let result = self.step(observation, after: last, now: now)
        self.lastAction = result.next
        return result
    }

    private mutating func step(_ observation: Observation, after last: Action, now: MonotonicInstant) -> (change: Change?, next: Action) {
        if case .unreachable(let why) = observation {
            // Nothing proven: a leader leads on, a standby's reading of absence starts again.
            self.lastError = why
            self.absentSince = nil
            return (nil, .none)
        }
        self.lastError = nil
        switch observation {
        case .written(let revision):
            return (self.lead(revision: revision), .none)
        case .held(let by, let revision) where by == self.holder:
            // Its own name: a write whose answer was lost. It leads.
            return (self.lead(revision: revision), .none)
        case .held(let by, let revision) where by.isEmpty:
            // Released by a clean stop: taken at once (once: a take that failed waits for the tick).
            self.heldBy = ""
            self.absentSince = nil
            if case .take = last { return (nil, .none) }
            return (nil, .take(revision: revision))
        case .held(let by, _):
            // Proof: another bridge's name.
            self.heldBy = by
            self.lastLeader = by
            self.absentSince = nil
            guard self.leading else { return (nil, .none) }
            self.leading = false
            self.confirmed = false
            self.revision = nil
            return (.stoppedLeading(holder: by), .none)
        case .missing:
            if self.leading {
                // Expired while it could not renew: written again at once, still leading.
                if case .take = last { return (nil, .none) }
                self.revision = nil
                return (nil, .take(revision: nil))
            }
            let since = self.absentSince ?? now
            self.absentSince = since
            if now - since >= self.grace, last == .read { return (nil, .take(revision: nil)) }
            return (nil, .none)
        case .unreachable:
            return (nil, .none)
        }
    }

    private mutating func lead(revision: UInt64) -> Change? {
        self.revision = revision
        self.confirmed = true
        self.absentSince = nil
        self.heldBy = self.holder
        guard !self.leading else { return nil }
        self.leading = true
        return .startedLeading(previous: self.lastLeader)
    }

    /// `status`'s words: `leading`, `standing by for NAME`, or what it is waiting for.
    public var state: String {
        if self.leading { return self.confirmed ? "leading" : "leading (its lease not yet written again since NATS came back)" }
        if let heldBy = self.heldBy, !heldBy.isEmpty { return "standing by for \(heldBy)" }
        if let lastError = self.lastError { return "unknown: \(lastError)" }
        if self.absentSince != nil { return "standing by: the lease is free, taken once it has been for \(self.grace.short)" }
        return "standing by"
    }
}
