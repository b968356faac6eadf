import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// Every connected client, the message sequence, the replay ring and the waiting `request`s:
/// receives the link's events and fans each upstream message out to the subscribers. Confined
/// to the link's event loop, so a message reaches every subscriber without a hop or a lock.
///
/// The lines of the messages one socket read brings are written one after another into one
/// buffer (`unsent`), and go out when the read is done (`flush`): the whole buffer, as it is, to
/// every subscriber that is caught up (one write each, the same bytes for all), whole to the
/// queues of those that are behind (one entry, whatever the number of lines), and line by line
/// (slices of it, no copy) to the replay ring. Anything
/// else a subscriber is sent (a state line, a reply, a replay) flushes first, so the order of
/// the lines never changes. A subscriber with a filter gets a copy of each line it matches.
final class Fanout: UpstreamEventSink {
    private(set) var configuration: Configuration.Local
    private let status: SystemdStatus
    let metrics: DaemonMetrics
    let allocator = ByteBufferAllocator()

    private(set) var clients: [Int: LocalClient] = [:] {
        didSet { self.clientsVersion &+= 1 }
    }
    /// Counts every change to `clients`: what was found there at another count is found again.
    private(set) var clientsVersion: UInt64 = 0
    /// The subscribed clients, in one array: the per-message loop walks no dictionary.
    private var subscribers: [LocalClient] = []
    /// Where live lines go: the subscribers not catching up from the journal, without a filter
    /// (every line) and with one (the lines it takes). `relist` keeps them.
    private var liveAll: [LocalClient] = []
    private var liveFiltered: [LocalClient] = []
    /// How many subscribers have a filter (the payload is parsed only when one does).
    private var filtered = 0
    private(set) var seq: UInt64 = 0
    /// The stream `seq` counts in: new at every start, since seq starts again at 1; with a
    /// journal, the journal's (which goes on across clean restarts).
    let stream: String
    private(set) var drops: UInt64 = 0
    private(set) var ring: ReplayRing
    /// Every message numbered goes here too, when `[journal]` is on.
    let journal: Journal?
    /// The messages published since the last flush, for the journal and the fleet.
    private var journalEntries: [Journal.Entry] = []
    /// `[fleet]` on a bridge: every message numbered is published into the NATS JetStream
    /// stream too (its tap, given at `init`).
    let fleet: FleetPublisher?
    /// The consumers catching up from the journal (Fanout+Journal.swift), by client id.
    var replays: [Int: JournalReplay] = [:]
    /// The digits of the last message's receive time (the messages of one read share it).
    var tsDigits = TimestampDigits()
    /// Clients with routed lines not yet sent (`+Routed`): numbered before every line in
    /// `unsent` (a routed one sends those first), so they go first.
    var routedClients: [LocalClient] = []
    /// Messages routed to the same several clients one after another (`+RoutedRun`).
    var run = RoutedRun()
    var hasUnsentLines: Bool { !self.unsentEnds.isEmpty }
    /// Messages published since the last flush, and whether their lines are written: only when
    /// an NDJSON subscriber is there, or no WebSocket app (the ring keeps lines then); with only
    /// the face's apps, their frames are all that is made (and what the ring keeps). Decided
    /// at a flush's first message: a subscriber that comes flushes first (`setSubscription`).
    private var unsentMessages = 0
    private var writesLines = true
    let pending: PendingRequests
    /// Whether a subscriber needs a message's parsed view: a filter, `inline_json`, a request's match.
    func upstreamLinkRequestsInFlight(_ link: any LinkControl) -> Int { self.pending.matchedCount }

    var needsView: Bool { self.configuration.inlineJSON || self.filtered > 0 || self.pending.hasMatched }
    /// The subscribers that see the wire as it is (`"all"`).
    private(set) var wireTaps: [LocalClient] = []
    /// The lines published since the last flush, one after another, and where each one ends
    /// (the last has seq `seq`, the ones before count down to it).
    private var unsent = ByteBuffer()
    private var unsentEnds: [Int] = []
    /// The size of the last flush (the next buffer starts at it).
    private var lastFlushBytes = 0
    /// The WebSocket face's apps, each message to them as a frame (`Fanout+Frames`).
    var frames = FrameFanout()
    let eventLoop: any EventLoop

    init(
        configuration: Configuration.Local, status: SystemdStatus, metrics: DaemonMetrics = DaemonMetrics(), eventLoop: any EventLoop,
        pending: PendingRequests? = nil, journal: (Journal, Journal.Recovered)? = nil, stream: String? = nil, fleet: FleetPublisher? = nil
    ) {
        self.fleet = fleet
        self.configuration = configuration
        self.status = status
        self.metrics = metrics
        self.eventLoop = eventLoop
        self.pending = pending ?? PendingRequests(eventLoop: eventLoop)
        self.ring = ReplayRing(maxMessages: configuration.replay, maxBytes: configuration.replayBytes)
        self.journal = journal?.0
        // A given stream (a fleet follower's, whose seqs are its stream's) outlasts a journal's.
        self.stream = Self.stream(given: stream, journal: journal?.0)
        if let recovered = journal?.1 { self.seq = recovered.lastSeq }
    }

    var subscriberCount: Int { self.subscribers.count }
    /// Where the stream is: the last seq numbered, and the stream's id.
    var position: (seq: UInt64, stream: String) { (self.seq, self.stream) }
    var clientCount: Int { self.clients.count }
    /// The connected client `id`, if it still is.
    func client(_ id: Int) -> LocalClient? { self.clients[id] }
    /// Every connected client.
    var allClients: Dictionary<Int, LocalClient>.Values { self.clients.values }

    func update(configuration: Configuration.Local) {
        self.configuration = configuration
        self.ring.maxMessages = configuration.replay
        self.ring.maxBytes = configuration.replayBytes
        self.ring.trim()
    }

    // MARK: - Registry

    func insert(_ client: LocalClient) {
        // A new client counts from the seq its hello shows: what came before goes out first.
        self.flush()
        self.clients[client.id] = client
        if client.subscribed {
            self.subscribers.append(client)
            if client.filter != nil { self.filtered += 1 }
        }
        self.relist(client)
    }

    /// Puts `client` in the live list its subscription and its replay say (none while it
    /// replays: the replay delivers to it).
    func relist(_ client: LocalClient) {
        self.liveAll.removeAll { $0 === client }
        self.liveFiltered.removeAll { $0 === client }
        guard client.subscribed, self.replays[client.id] == nil else { return }
        if client.filter == nil {
            self.liveAll.append(client)
        } else {
            self.liveFiltered.append(client)
        }
    }

    func remove(_ client: LocalClient) -> Bool {
        guard self.clients.removeValue(forKey: client.id) != nil else { return false }
        self.setSubscription(client, subscribed: false, filter: nil)
        self.pending.cancelAll(of: client)
        return true
    }

    /// The one place a client's subscription changes.
    func setSubscription(_ client: LocalClient, subscribed: Bool, filter: Filter?, wire: Bool = false) {
        // The messages published before the change go out under the old subscription.
        self.flush()
        self.endReplay(of: client)
        if client.subscribed {
            self.subscribers.removeAll { $0 === client }
            if client.filter != nil { self.filtered -= 1 }
        }
        if client.subscription.wire { self.wireTaps.removeAll { $0 === client } }
        client.subscription.subscribed = subscribed
        client.subscription.filter = subscribed ? filter : nil
        client.subscription.wire = subscribed && wire
        if client.subscription.wire { self.wireTaps.append(client) }
        if subscribed {
            self.subscribers.append(client)
            if filter != nil { self.filtered += 1 }
        }
        self.relist(client)
    }

    func countDrops(_ n: Int) {
        self.drops += UInt64(n)
        self.metrics.dropped(n, .subscriberQueueFull)
    }

    // MARK: - Link events

    func upstreamLink(_ link: any LinkControl, emitted event: UpstreamEvent) {
        switch event {
        case .message(let message):
            self.publish(message)
        case .state(let phase, let reason, _):
            self.flush()
            let line = StateLine(state: phase, reason: reason, ts: WallClock.millisecondsSinceEpoch())
            let buffer = MessageLineEncoder.line(line.json, allocator: self.allocator)
            for client in self.subscribers {
                client.send(buffer)
            }
            // The answers to requests in flight went with the link: say so now, not at their timeout.
            if phase != .open && self.pending.hasMatched {
                for entry in self.pending.takeAll() {
                    let error = ProtocolError(
                        .linkLost, "the upstream link went \(phase.rawValue) (\(reason)) before the answer came; send the request again once status says open",
                        id: entry.id)
                    entry.client.send(MessageLineEncoder.line(error.reply, allocator: self.allocator))
                }
            }
            self.status.update(link: link, subscribers: self.subscriberCount)
        case .roundTrip:
            self.status.update(link: link, subscribers: self.subscriberCount)
        case .attempt, .retryScheduled:
            break
        }
    }

    /// The upstream read that brought the last messages is done: they go out.
    func upstreamLinkReadComplete(_ link: any LinkControl) {
        self.flush()
    }

    /// Some subscriber sees the wire as it is (`tapWire`).
    var hasWireTaps: Bool { !self.wireTaps.isEmpty }

    /// The stream is at `seq` before its first message here (a fleet follower's).
    func skip(to seq: UInt64) {
        guard seq > self.seq else { return }
        self.flush()
        self.seq = seq
    }

    /// The next seq, for the open run's next line (`continueRun` checked it is the run's).
    func takeSeqInRun() -> UInt64 {
        self.seq += 1
        return self.seq
    }

    /// The next seq, for a message for one app (flushed before: the stream's order holds).
    func takeSeq() -> UInt64 {
        if self.run.isOpen { self.closeRun(now: false) }
        self.seq += 1
        return self.seq
    }

    /// `parsed`: the payload, when the protocol layer parsed it already; `at`: its seq, when a
    /// fleet's stream numbered it (past the last one, maybe not next to it).
    func publish(_ message: UpstreamMessage, parsed: JSONValue? = nil, at given: UInt64? = nil) {
        if let given, given != self.seq + 1 {
            // The lines of one flush have consecutive seqs.
            self.flush()
            self.seq = given - 1
        }
        if self.run.isOpen { self.closeRun(now: false) }
        self.seq += 1
        let seq = self.seq
        // Parse the payload only if someone needs it: inline JSON, a filter, or a request.
        var parsed = parsed
        if parsed == nil, message.kind == .text && (self.configuration.inlineJSON || self.filtered > 0 || self.pending.hasMatched) {
            parsed = try? JSONValue.parse(message.data.readableBytesView)
        }
        if self.unsentMessages == 0 {
            self.writesLines = !self.subscribers.isEmpty || self.frames.isEmpty
            if self.writesLines { self.unsent = self.allocator.buffer(capacity: Self.startCapacity(after: self.lastFlushBytes)) }
            // Should no read end come (a message from elsewhere than a socket read), the loop's
            // next turn sends it.
            self.eventLoop.assumeIsolated().execute { self.flush() }
        }
        self.unsentMessages += 1
        if self.journal != nil || self.fleet != nil {
            self.journalEntries.append(Journal.Entry(seq: seq, message: message))
        }
        if !self.frames.isEmpty { self.frames.append(message, seq: seq, keep: !self.writesLines && self.ring.keepsLines) }
        guard self.writesLines else {
            if self.pending.hasMatched { self.matchRequests(parsed, seq: seq) }
            return
        }
        let start = self.unsent.writerIndex
        MessageLineEncoder.write(seq: seq, message, inlineJSON: self.configuration.inlineJSON, parsed: parsed, into: &self.unsent, ts: &self.tsDigits)
        self.unsentEnds.append(self.unsent.writerIndex)
        if self.filtered > 0 {
            // A copy for each subscriber whose filter matches (it holds only some lines: a
            // slice would keep whole read buffers alive).
            var copy: ByteBuffer?
            for client in self.liveFiltered {
                guard let filter = client.filter, message.kind == .text, filter.matches(json: parsed, text: message.data.readableBytesView) else { continue }
                if copy == nil { copy = self.unsent.getSlice(at: start, length: self.unsent.writerIndex - start).map { ByteBuffer(buffer: $0) } }
                client.deliver(copy!, seq: seq)
            }
        }
        if self.pending.hasMatched { self.matchRequests(parsed, seq: seq) }
    }

    /// The `request`s waiting for a message like `parsed` (`seq`) are answered with it.
    private func matchRequests(_ parsed: JSONValue?, seq: UInt64) {
        if let parsed {
            let matches = self.pending.takeMatches(parsed)
            if !matches.isEmpty { self.flush() }
            for entry in matches {
                let reply = ReplyLine.ok(id: entry.id, RequestResult(seq: seq, payload: parsed).json)
                entry.client.send(MessageLineEncoder.line(reply.json, allocator: self.allocator))
            }
        }
    }

    /// Sends the lines published since the last flush (see the type's comment).
    func flush() {
        // The routed lines were numbered before the broadcast ones.
        if self.run.isOpen { self.closeRun(now: true) }
        if !self.routedClients.isEmpty { self.flushRouted() }
        if self.frames.hasRouted { self.frames.flushRouted() }
        guard self.unsentMessages > 0 else { return }
        self.unsentMessages = 0
        guard !self.unsentEnds.isEmpty else {
            // Only the face's apps: their frames, and the ring keeps those.
            self.appendJournalEntries()
            self.frames.flush()
            self.frames.drainKept(into: &self.ring)
            return
        }
        let lines = self.unsent
        self.unsent = ByteBuffer()
        let ends = self.unsentEnds
        self.unsentEnds = []
        self.lastFlushBytes = lines.readableBytes
        let batch = LineBatch.kept(lines, seq: self.seq + 1 - UInt64(ends.count), ends: ends, allocator: self.allocator)
        if self.ring.keepsLines {
            batch.forEachLine { seq, line in self.ring.append(seq: seq, line: line) }
        }
        self.appendJournalEntries()
        for client in self.liveAll {
            client.deliver(batch)
        }
        self.frames.flush()
    }

    /// The messages of this flush to the journal and the fleet.
    private func appendJournalEntries() {
        guard !self.journalEntries.isEmpty else { return }
        self.journal?.append(self.journalEntries)
        self.fleet?.publish(self.journalEntries)
        self.journalEntries.removeAll(keepingCapacity: true)
    }
}

@available(*, unavailable)
extension Fanout: Sendable {}

/// A client's subscription: whether it receives upstream messages, and through which filter.
/// Its setters are private to this file, so only the fan-out changes it (in
/// `setSubscription`), and its subscriber list cannot disagree with the clients' own state.
final class ClientSubscription {
    fileprivate(set) var subscribed = true
    fileprivate(set) var filter: Filter?
    /// Sees the wire as it is (`"all"`): also what the protocol layer routes or answers.
    fileprivate(set) var wire = false
    /// The replay's next read, once the client's queue is down to half its bounds.
    private var onQueueLow: (() -> Void)?

    /// Calls `next` once the client's queue is down to half its bounds (`drained`); nil: never.
    func whenQueueLow(_ next: (() -> Void)?) {
        self.onQueueLow = next
    }

    /// The client wrote what it could: the replay's next read if its queue is low now.
    func drained(queueIsLow: @autoclosure () -> Bool) {
        guard let next = self.onQueueLow, queueIsLow() else { return }
        self.onQueueLow = nil
        next()
    }
}

@available(*, unavailable)
extension ClientSubscription: Sendable {}
