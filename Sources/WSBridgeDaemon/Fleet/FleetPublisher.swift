import CNATS
import DequeModule
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import WSBridgeCore
import WSBridgeProtocol

/// `[fleet]` (docs/fleet.md): every message the fan-out numbers (what the journal keeps) is
/// published into a NATS JetStream stream with its seq and stream id as headers and a
/// `Nats-Msg-Id` of both (JetStream drops a message it has under that id), in seq order, at
/// most `fleet.max_in_flight` waiting for JetStream's acknowledgement. A message counts as
/// published when JetStream acknowledges it; one that fails (an error, no answer within
/// `fleet.ack_timeout`, NATS gone) is published again, and while NATS is away the messages wait
/// (up to `fleet.max_backlog_bytes`, the oldest given up past it, counted) and go once it is
/// back. The upstream and the local subscribers never wait for NATS. Confined to the daemon's
/// event loop; the NATS client's threads hop to it.
final class FleetPublisher {
    static let seqHeader = "Wsbridge-Seq"
    static let streamHeader = "Wsbridge-Stream"
    /// A message for one follower's app: `holder/app` (FleetRemoteApps).
    static let toHeader = "Wsbridge-To"

    enum State: String {
        case connecting
        case connected
        case disconnected
        case closed
    }

    let fleet: Configuration.Fleet
    let library: NATSLibrary
    let eventLoop: any EventLoop
    let logger: Logger
    /// The feed's stream id (the fan-out's): with the seq, the message's id in JetStream.
    let feed: String
    var handlers: NATSHandlers?
    var connection: OpaquePointer?
    /// `fleet.standby`: which bridge leads (it answers followers' sends; with `cold`, only it
    /// holds the upstream).
    var lease: FleetLease?
    /// `fleet.standby = "hot"`: each message's id taken from it (`upstream.dedupe`), so that
    /// JetStream keeps it once from every bridge that publishes it.
    var idPaths: [JSONPathScan.Path]?
    /// Followers' sends (`fleet.requests`): handed to `serve`, answered with its outcome.
    /// `mirror`: a hot standby's copy of a follower's app's message (only its subscriptions
    /// go, unanswered).
    var serve: ((OutboundMessage, AppID?, FollowerRequest, _ mirror: Bool) -> SendOutcome)?
    /// What the protocol layer routes to followers' apps goes into the stream: not from a
    /// standby (the leader publishes it).
    var publishesRouted: Bool { self.lease?.leading ?? true }
    /// With upstream.protocol: the followers' apps the protocol layer holds.
    let remoteApps = FleetRemoteApps()
    /// A follower's sticky set (its holder's name, the set as JSON): FleetStickyHolders.
    var stickySet: ((String, ByteBuffer, _ protocol: String?) -> Void)?
    var requests: NATSMessages?
    var requestsSubscription: OpaquePointer?
    var jetStream: OpaquePointer?
    var state = State.connecting
    /// The client said it is connected (maybe before `connection` was set here).
    var cameUp = false
    /// `fleet.subject` with `${msg:PATH}`: each message's subject from it.
    let template: FleetSubject?
    /// The subject of a message of no key's (a takeover).
    var subject: String { self.template?.filled("_") ?? self.fleet.subject }
    /// `fleet.ack_timeout` in milliseconds.
    var ackTimeout: Int64 { self.fleet.ackTimeout.nanoseconds / 1_000_000 }
    var lastError: String?
    /// A numbered message on its way into the stream; `previous`: the numbered message before
    /// it (nil: none of this run's, or it was given up), whose id it expects to be the stream's
    /// last (`Nats-Expected-Last-Msg-Id`), so the stream has them in seq order.
    struct Pending {
        var seq: UInt64
        var previous: UInt64?
        var message: UpstreamMessage
        /// For one follower's app (`Wsbridge-To`), not for every subscriber.
        var to: String? = nil
        /// `fleet.batch`: handed in the batch that ends at this seq (it goes again as it went).
        var batchEnd: UInt64? = nil
        /// `fleet.batch`, on a batch's last message in flight: the number after its messages'.
        var numberAfter: UInt64 = 0
    }

    /// Numbered, not yet handed to the client; their bytes.
    var waiting: Deque<Pending> = []
    var waitingBytes = 0
    /// Handed to the client, waiting for JetStream's acknowledgement.
    var inFlight: [UInt64: Pending] = [:]
    /// Every message up to this one is acknowledged (or given up, `lost`); those after it
    /// acknowledged out of order.
    private(set) var acknowledgedThrough: UInt64 = 0
    var acknowledgedAhead: Set<UInt64> = []
    /// Seqs the fan-out numbered that are no message of the stream's (a protocol's messages for
    /// one app), first to last.
    var skipped: [UInt64: UInt64] = [:]
    var acknowledged = 0
    /// The last message numbered (the stream's: `skipped` are not).
    private(set) var numberedThrough: UInt64 = 0
    private var numberedAny = false
    /// The next message numbered expects nothing (the one before it was given up).
    var unchainNext = false
    /// Given up past `max_backlog_bytes` (with no journal to read them from again).
    var lost = 0
    var retry: Scheduled<Void>?
    /// JetStream's answers, filled on the client's thread, taken on the loop.
    let answers = NIOLockedValueBox(Answers())
    struct Answers {
        var answers: [(seq: UInt64, error: String?)] = []
        var scheduled = false
    }
    /// `[journal]`: past `max_backlog_bytes` the newest waiting messages are dropped from memory
    /// and read again from the journal once NATS takes them (FleetPublisher+Journal.swift).
    let journal: Journal?
    var spill: Spill?
    /// The daemon stops: fulfilled once every message numbered is acknowledged.
    var drained: EventLoopPromise<Void>?
    /// A publish was refused (or NATS came back): nothing more is handed to the client until what
    /// is in flight has its answers and the stream's last message is read (FleetPublisher+Resync).
    var resyncing = false
    /// The last message handed to the client and its id: the next one's expectation (hot).
    var lastHanded: (seq: UInt64, id: String)?
    var resyncReading = false
    /// `fleet.batch` > 1 (FleetPublisher+Batch.swift): the number of the next batch's first message
    /// (nil: not known until the stream's end is read), the stream seq the next batch expects last
    /// (the first after that read), the number after every message JetStream acknowledged, and
    /// the messages of each batch in flight (by its last seq; one message alone is not here).
    var nextNumber: UInt64?
    var expectSeq: UInt64?
    var numberedThroughAcknowledged: UInt64?
    var batches: [UInt64: [Pending]] = [:]
    var batchBytes: [UInt8] = []
    /// Its messages carry numbers: `fleet.batch` > 1, or the stream's messages are numbered (a
    /// bridge batched into it before): one message alone is then numbered too, or followers would
    /// take it for one they had (FleetPublisher+Batch.swift).
    lazy var numbering = self.fleet.batch > 1

    init(fleet: Configuration.Fleet, library: NATSLibrary, feed: String, journal: Journal?, eventLoop: any EventLoop, logger: Logger) {
        self.fleet = fleet
        self.journal = journal
        self.template = FleetSubject(fleet.subject).flatMap { $0.isTemplate ? $0 : nil }
        self.library = library
        self.feed = feed
        self.eventLoop = eventLoop
        self.logger = logger
    }

    // MARK: - Publishing

    /// Messages the fan-out numbered (in seq order).
    func publish(_ entries: [Journal.Entry]) {
        guard self.state != .closed else { return }
        for entry in entries {
            if self.numberedAny {
                if entry.seq > self.numberedThrough + 1 { self.skipped[self.numberedThrough + 1] = entry.seq - 1 }
            } else if entry.seq > self.acknowledgedThrough + 1 {
                // The first of this run: the seqs before it are an earlier run's (a journal's).
                self.acknowledgedThrough = entry.seq - 1
            }
            let pending = Pending(
                seq: entry.seq, previous: self.numberedAny && !self.unchainNext ? self.numberedThrough : nil, message: entry.message, to: entry.to)
            self.numberedAny = true
            self.unchainNext = false
            self.numberedThrough = entry.seq
            // While the journal has the newest, they are read from it (in order), not kept here;
            // a message for one follower's app is in no journal: given up.
            guard self.spill == nil else {
                if entry.to != nil { self.giveUpRouted(entry.seq) }
                continue
            }
            self.waiting.append(pending)
            self.waitingBytes += entry.message.data.readableBytes
        }
        self.bound()
        self.pump()
    }

    /// The backlog within `max_backlog_bytes`: with a journal the newest go (read again from
    /// it); without, the oldest are given up.
    private func bound() {
        guard self.waitingBytes > self.fleet.maxBacklogBytes else { return }
        if self.spillToJournal(above: self.fleet.maxBacklogBytes / 2) { return }
        while self.waitingBytes > self.fleet.maxBacklogBytes, let oldest = self.waiting.popFirst() {
            self.waitingBytes -= oldest.message.data.readableBytes
            self.giveUp(
                oldest.seq, 1,
                why: "NATS was away past fleet.max_backlog_bytes = \(self.fleet.maxBacklogBytes), and there is no [journal] to read it again from")
            self.acknowledgedAhead.insert(oldest.seq)
        }
        self.advance()
    }

    /// Messages never published (`count`, the first `seq`): the next expects nothing before it.
    func giveUp(_ seq: UInt64, _ count: Int, why: String) {
        let before = self.lost
        self.lost += count
        if self.waiting.isEmpty { self.unchainNext = true } else { self.waiting[self.waiting.startIndex].previous = nil }
        if before == 0 || self.lost / 1000 > before / 1000 {
            self.logger.error("fleet: \(self.lost) message(s) never published (the last from seq \(seq)): \(why)")
        }
    }

    /// Hands waiting messages to the client while there is room in flight: the waiting ones,
    /// then those read back from the journal.
    func pump() {
        defer { self.readSpill() }
        guard self.state == .connected, let jetStream = self.jetStream, !self.resyncing, self.mayPublish else {
            // A standby's number is read again when it leads.
            if self.numbering, !self.mayPublish { self.nextNumber = nil }
            return
        }
        if self.numbering {
            while self.inFlight.count < self.fleet.maxInFlight, self.handBatch(jetStream) {}
            return
        }
        let api = self.library.api
        while self.inFlight.count < self.fleet.maxInFlight {
            let fromWaiting = !self.waiting.isEmpty
            guard let next = self.waiting.first ?? self.spill?.buffer.first else { break }
            let message = next.message
            var msg: OpaquePointer?
            let length = message.data.readableBytes
            let made = message.data.withUnsafeReadableBytes { bytes in
                api.natsMsg_Create(
                    &msg, self.template?.subject(for: bytes) ?? self.fleet.subject, nil, bytes.baseAddress?.assumingMemoryBound(to: CChar.self),
                    Int32(length))
            }
            guard made == NATS_OK, let msg else {
                self.failed("a message for NATS: \(self.library.text(made))")
                return
            }
            _ = api.natsMsgHeader_Set(msg, Self.seqHeader, "\(next.seq)")
            _ = api.natsMsgHeader_Set(msg, Self.streamHeader, self.feed)
            if message.kind == .binary { _ = api.natsMsgHeader_Set(msg, Self.kindHeader, "binary") }
            if let to = next.to { _ = api.natsMsgHeader_Set(msg, Self.toHeader, to) }
            // Stored once (by its id), and only right after the one before it: a message whose
            // predecessor failed is refused too, and both go again in order.
            // (A message for one follower's app comes from the leader only, and may be the same
            // bytes as another app's.)
            let id = next.to == nil ? self.idPaths.map { Self.messageID(message.data, paths: $0) } ?? "\(self.feed)-\(next.seq)" : "\(self.feed)-\(next.seq)"
            // Hot bridges publish the same messages under the same ids: each expects the id of
            // the message before it, whichever bridge stored it (a second copy is dropped as a
            // duplicate before any expectation is checked).
            let previous: String? =
                if self.idPaths == nil {
                    next.previous.map { "\(self.feed)-\($0)" }
                } else {
                    next.previous.flatMap { $0 == self.lastHanded?.seq ? self.lastHanded?.id : nil }
                }
            let status = self.hand(msg, to: jetStream, id: id, previous: previous)
            guard status == NATS_OK else {
                // NATS away, or the client's buffer full: the message waits for the next try,
                // chained as it was (only a handed message is the next one's expectation).
                self.failed("publishing: \(self.library.text(status))")
                return
            }
            self.lastHanded = (next.seq, id)
            if fromWaiting {
                self.waiting.removeFirst()
                self.waitingBytes -= length
            } else {
                self.spill?.buffer.removeFirst()
            }
            self.inFlight[next.seq] = next
        }
    }

    func failed(_ why: String) {
        if self.lastError != why { self.logger.warning("fleet: \(why); trying again in a second") }
        self.lastError = why
        self.retryLater(.seconds(1)) { self.pump() }
    }

    /// JetStream's answers, as the client's thread left them.
    func takeAnswers() {
        let answers = self.answers.withLockedValue { box in
            box.scheduled = false
            defer { box.answers.removeAll(keepingCapacity: true) }
            return box.answers
        }
        for (seq, error) in answers { self.acknowledged(seq, error: error) }
    }

    /// JetStream's answer to message `seq` (`error`: why it was not stored).
    private func acknowledged(_ seq: UInt64, error: String?) {
        guard let pending = self.inFlight.removeValue(forKey: seq) else { return }
        let batch = self.batches.removeValue(forKey: seq)
        if let error {
            // Published again, in its place: it goes before every later waiting one.
            if self.lastError != error { self.logger.warning("fleet: message \(seq) not stored (\(error)); publishing it again") }
            self.lastError = error
            let first = batch?.first?.seq ?? seq
            let index = self.waiting.firstIndex { $0.seq > first } ?? self.waiting.endIndex
            self.waiting.insert(contentsOf: batch ?? [pending], at: index)
            for member in batch ?? [pending] { self.waitingBytes += member.message.data.readableBytes }
            // Where the stream stands decides what goes next: read once the flight is back.
            self.resyncing = true
            self.resyncWhenLanded()
            return
        }
        if let batch {
            self.acknowledged += batch.count
            for member in batch { self.acknowledgedAhead.insert(member.seq) }
        } else {
            self.acknowledged += 1
            self.acknowledgedAhead.insert(seq)
        }
        if self.numbering { self.numberedThroughAcknowledged = max(self.numberedThroughAcknowledged ?? 0, pending.numberAfter) }
        self.advance()
        self.resyncWhenLanded()
        self.pump()
        if let drained = self.drained, self.waiting.isEmpty, self.inFlight.isEmpty, self.spill == nil {
            self.drained = nil
            drained.succeed()
        }
    }

    func advance() {
        while true {
            let next = self.acknowledgedThrough + 1
            if self.acknowledgedAhead.remove(next) != nil {
                self.acknowledgedThrough = next
            } else if let end = self.skipped.removeValue(forKey: next) {
                self.acknowledgedThrough = end
            } else {
                return
            }
        }
    }
}

@available(*, unavailable)
extension FleetPublisher: Sendable {}
