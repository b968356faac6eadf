import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// Every connected client, the message sequence, the replay ring and the waiting `request`s:
/// receives the link's events and fans each upstream message out to the subscribers. Confined
/// to the link's event loop, so a message reaches every subscriber's queue without a hop, a lock
/// or a copy: it is encoded once into a buffer all of them share.
final class Fanout: UpstreamEventSink {
    private var configuration: Configuration.Local
    private let status: SystemdStatus
    let metrics: DaemonMetrics
    private let allocator = ByteBufferAllocator()

    private(set) var clients: [Int: LocalClient] = [:]
    /// The subscribed clients, in one array: the per-message loop walks no dictionary.
    private var subscribers: [LocalClient] = []
    /// How many subscribers have a filter (the payload is parsed only when one does).
    private var filtered = 0
    private(set) var seq: UInt64 = 0
    /// The stream `seq` counts in: new at every start, since seq starts again at 1.
    let stream: String = Fanout.newStreamID()
    private(set) var drops: UInt64 = 0
    private var ring: ReplayRing
    /// The digits of the last message's receive time (the messages of one read share it).
    private var tsDigits = TimestampDigits()
    var pending = PendingRequests()

    init(configuration: Configuration.Local, status: SystemdStatus, metrics: DaemonMetrics = DaemonMetrics()) {
        self.configuration = configuration
        self.status = status
        self.metrics = metrics
        self.ring = ReplayRing(maxMessages: configuration.replay, maxBytes: configuration.replayBytes)
    }

    var subscriberCount: Int { self.subscribers.count }
    var clientCount: Int { self.clients.count }

    func update(configuration: Configuration.Local) {
        self.configuration = configuration
        self.ring.maxMessages = configuration.replay
        self.ring.maxBytes = configuration.replayBytes
        self.ring.trim()
    }

    // MARK: - Registry

    func insert(_ client: LocalClient) {
        self.clients[client.id] = client
        if client.subscribed {
            self.subscribers.append(client)
            if client.filter != nil { self.filtered += 1 }
        }
    }

    func remove(_ client: LocalClient) -> Bool {
        guard self.clients.removeValue(forKey: client.id) != nil else { return false }
        self.setSubscription(client, subscribed: false, filter: nil)
        self.pending.removeAll(of: client)
        return true
    }

    /// The one place a client's subscription changes.
    func setSubscription(_ client: LocalClient, subscribed: Bool, filter: Filter?) {
        if client.subscribed {
            self.subscribers.removeAll { $0 === client }
            if client.filter != nil { self.filtered -= 1 }
        }
        client.subscription.subscribed = subscribed
        client.subscription.filter = subscribed ? filter : nil
        if subscribed {
            self.subscribers.append(client)
            if filter != nil { self.filtered += 1 }
        }
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
        case .state(let phase, let reason):
            let line = StateLine(state: phase, reason: reason, ts: WallClock.millisecondsSinceEpoch())
            let buffer = MessageLineEncoder.line(line.json, allocator: self.allocator)
            for client in self.subscribers {
                client.send(buffer)
            }
            self.status.update(link: link, subscribers: self.subscriberCount)
        case .roundTrip:
            self.status.update(link: link, subscribers: self.subscriberCount)
        case .attempt, .retryScheduled:
            break
        }
    }

    private func publish(_ message: UpstreamMessage) {
        self.seq += 1
        let seq = self.seq
        // Parse the payload only if someone needs it: inline JSON, a filter, or a request.
        var parsed: JSONValue?
        if message.kind == .text && (self.configuration.inlineJSON || self.filtered > 0 || !self.pending.isEmpty) {
            parsed = try? JSONValue.parse(message.data.readableBytesView)
        }
        let line = MessageLineEncoder.message(
            seq: seq,
            message,
            inlineJSON: self.configuration.inlineJSON,
            parsed: parsed,
            allocator: self.allocator,
            ts: &self.tsDigits
        )
        self.ring.append(seq: seq, line: line)
        if self.filtered == 0 {
            // The common case: no subscriber filters, nothing to look at but the queue.
            for client in self.subscribers { client.deliver(line, seq: seq) }
        } else {
            for client in self.subscribers {
                if let filter = client.filter {
                    guard let parsed, filter.matches(parsed) else { continue }
                }
                client.deliver(line, seq: seq)
            }
        }
        if !self.pending.isEmpty, let parsed {
            for entry in self.pending.takeMatches(parsed) {
                let reply = ReplyLine.ok(id: entry.id, RequestResult(seq: seq, payload: parsed).json)
                entry.client.send(MessageLineEncoder.line(reply.json, allocator: self.allocator))
            }
        }
    }

    // MARK: - Replay

    /// A stream id: 16 hex digits, random.
    static func newStreamID() -> String {
        let hex = String(UInt64.random(in: .min ... .max), radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }

    /// Resends buffered messages after `since` (in `stream`, when the consumer said). What is no
    /// longer buffered is reported as a `not_buffered` gap; a `since` from an earlier stream as
    /// a `restarted` gap, then this stream from its start (as far as still buffered).
    func replay(to client: LocalClient, since: UInt64, stream: String?) {
        var since = since
        let oldest = self.ring.oldestSeq ?? (self.seq + 1)
        if GapLine.isRestart(since: since, stream: stream, current: self.stream, last: self.seq) {
            let was = stream.map { "stream \($0)" } ?? "an earlier stream"
            let gap = GapLine(
                stream: self.stream, reason: GapLine.restarted, next: min(oldest, self.seq + 1), since: since,
                message:
                    "wsbridged restarted: seq \(since) was counted in \(was), and this daemon's stream \(self.stream) began again at seq 1; what followed seq \(since) there is lost, and delivery goes on from this stream's start"
            )
            client.send(MessageLineEncoder.line(gap.json, allocator: self.allocator))
            since = 0
        }
        guard since < self.seq else { return }
        if since + 1 < oldest {
            let gap = GapLine(
                stream: self.stream, reason: GapLine.notBuffered, from: since + 1, to: oldest - 1, next: oldest,
                message:
                    "no longer buffered: the replay ring keeps the last \(self.configuration.replay) messages (local.replay) up to \(self.configuration.replayBytes) bytes (local.replay_bytes)"
            )
            client.send(MessageLineEncoder.line(gap.json, allocator: self.allocator))
        }
        for entry in self.ring.entries where entry.seq > since {
            if let filter = client.filter {
                guard let parsed = Self.payloadJSON(ofLine: entry.line), filter.matches(parsed) else { continue }
            }
            client.deliver(entry.line, seq: entry.seq)
        }
    }

    /// The JSON payload of an encoded message line (for filters on replayed messages).
    private static func payloadJSON(ofLine line: ByteBuffer) -> JSONValue? {
        guard let json = try? JSONValue.parse(line.readableBytesView), let message = MessageLine(json: json) else { return nil }
        if let inline = message.inlineJSON { return inline }
        guard message.kind == .text, let text = message.data else { return nil }
        return try? JSONValue.parse(text)
    }
}

@available(*, unavailable)
extension Fanout: Sendable {}

/// A client's subscription: whether it receives upstream messages, and through which filter.
/// Its setters are private to this file, so only the fan-out changes it (in
/// `setSubscription`), and its subscriber list cannot disagree with the clients' own state.
final class Subscription {
    fileprivate(set) var subscribed = true
    fileprivate(set) var filter: Filter?
}

@available(*, unavailable)
extension Subscription: Sendable {}
