import CNATS
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import WSBridgeCore
import WSBridgeProtocol

/// `[fleet] role = "follower"` (docs/fleet.md): the upstream is the fleet's JetStream stream.
/// An ordered consumer (no acknowledgements, no redeliveries: the client makes it again from
/// the last message taken whenever it misses one) hands each message to the fan-out with its
/// seq in the stream, so every follower numbers a message alike; it starts after the last seq
/// this follower numbered (its journal's, across restarts), else after the stream's last. Its
/// apps' sends go to the bridge as NATS requests on `fleet.requests` and are answered with the
/// bridge's outcome. Confined to the daemon's event loop; the client's threads hop to it.
final class FleetFollower: LinkControl {
    let fleet: Configuration.Fleet
    let library: NATSLibrary
    let eventLoop: any EventLoop
    let logger: Logger
    let fanout: Fanout
    /// Its apps' sticky keys (the plane registers them): the bridge holds them for them.
    let session: UpstreamSession
    /// This follower's name among the bridge's holders: host, process and a random part (a pid
    /// comes again; the bridge must not take a restarted follower's apps for the last run's).
    var holder = ""
    /// With upstream.protocol: the layer that hands this host's apps what the bridge's routed to them.
    weak var protocolLayer: AppProtocolLayer?
    /// The apps whose messages went to the bridge's protocol layer (told when they go).
    var remoteApps: Set<AppID> = []
    /// The sticky keys each app (`AppID.everyone`: this follower) holds at the bridge's layer.
    var remoteSticky: [AppID: Set<String>] = [:]
    /// The bridge was told of sticky keys (an empty set is told once after).
    var stickyShared = false
    private var stickyTimer: Scheduled<Void>?
    let url: UpstreamURL
    private var handlers: NATSHandlers?
    var connection: OpaquePointer?
    private var jetStream: OpaquePointer?
    /// The consumer, and its callback's owner.
    private var subscription: OpaquePointer?
    private var consumer: NATSMessages?
    /// The bridge's answers to this follower's sends: one inbox, a subject per send.
    var inbox = ""
    private var answers: NATSMessages?
    private var answersSubscription: OpaquePointer?
    var waiting: [UInt64: (promise: EventLoopPromise<SendOutcome>, timeout: Scheduled<Void>)] = [:]
    var nextSend: UInt64 = 0
    private(set) var phase = ConnectionPhase.connecting
    private var phaseSince = WallClock.millisecondsSinceEpoch()
    var natsConnected = false
    var stopped = false
    var lastError: String?
    private var retry: Scheduled<Void>?
    /// The messages the consumer brought, not yet handed to the fan-out (filled on the client's
    /// thread, emptied on the loop: one hop for however many came meanwhile).
    let incoming = NIOLockedValueBox(Incoming())
    var received = 0
    /// The stream seq of the last message taken (its seq, or with batches its number, is the
    /// fan-out's position); nil: none taken in this run.
    var streamSeq: UInt64?
    /// When `received` last grew (FleetFollower+Stall.swift), and whether the stall was told.
    var advanced = (received: 0, at: NIODeadline.now())
    var stallTold = false
    /// The current consumer's number (`subscribe` makes a new one).
    var generation = 0
    var forwarded = 0
    var traffic = StatusReport.Traffic()

    init(configuration: Configuration, library: NATSLibrary, fanout: Fanout, session: UpstreamSession, eventLoop: any EventLoop, logger: Logger) {
        self.fleet = configuration.fleet
        self.library = library
        self.fanout = fanout
        self.session = session
        self.eventLoop = eventLoop
        self.logger = logger
        self.url = configuration.upstream.url
    }

    var roundTripTime: Duration? { nil }

    // MARK: - The connection

    /// Connects (the client keeps trying in the background) and subscribes once it is up.
    func start(name: String) {
        self.holder = "\(name):\(getpid()).\(String(UInt32.random(in: .min ... .max), radix: 36))"
        // The sticky set again every second: a bridge that took over learns it, and one that
        // stops hearing it lets the keys go.
        self.everySecond()
        let bound = NIOLoopBound(self, eventLoop: self.eventLoop)
        let loop = self.eventLoop
        let handlers = NATSHandlers(
            library: self.library,
            connectionChanged: { connected, closed in loop.execute { bound.value.connectionChanged(connected: connected, closed: closed) } },
            acknowledged: { _, _ in })
        self.handlers = handlers
        let answers = NATSMessages { message in
            let owned = UnsafeSendable(message)
            loop.execute { bound.value.answered(owned) }
        }
        self.answers = answers
        let library = self.library
        let fleet = self.fleet
        NIOThreadPool.singleton.runIfActive(eventLoop: self.eventLoop) { () throws -> (NATSConnected, String, UnsafeSendable<OpaquePointer?>) in
            let connected = try library.connect(fleet, name: name, handlers: handlers, maxPending: 1)
            var inbox: UnsafeMutablePointer<natsInbox>?
            try library.check(library.api.natsInbox_Create(&inbox), "an inbox for the bridge's answers")
            let prefix = inbox.map { String(cString: $0) } ?? "_INBOX.wsbridged"
            if let inbox { library.api.natsInbox_Destroy(inbox) }
            var subscription: OpaquePointer?
            try library.check(
                library.api.natsConnection_Subscribe(&subscription, connected.connection, "\(prefix).*", NATSMessages.callback, answers.closure),
                "subscribing to the bridge's answers")
            return (connected, prefix, UnsafeSendable(subscription))
        }.assumeIsolated().whenComplete { result in
            switch result {
            case .success(let (connected, inbox, subscription)):
                self.connection = connected.connection
                self.jetStream = connected.jetStream
                self.inbox = inbox
                self.answersSubscription = subscription.value
                if self.stopped {
                    self.release()
                } else if connected.now || self.natsConnected {
                    // Up now, or came up (its callback on the loop) before this was here.
                    self.connectionChanged(connected: true, closed: false)
                }
            case .failure(let error):
                self.lastError = "\(error)"
                self.logger.error("fleet: \(error)")
                self.enter(.idle, "\(error)")
            }
        }
    }

    private func everySecond() {
        guard !self.stopped else { return }
        self.stickyTimer = self.eventLoop.assumeIsolated().scheduleTask(in: .seconds(1)) {
            self.syncSticky()
            self.watchStall()
            self.everySecond()
        }
    }

    private func connectionChanged(connected: Bool, closed: Bool) {
        guard !self.stopped else { return }
        self.natsConnected = connected
        if closed || !connected {
            self.lastError = closed ? "the NATS connection closed" : "NATS disconnected"
            if self.phase != .idle { self.enter(.connecting, "\(self.lastError!): waiting for it to come back") }
            return
        }
        // A new consumer from the last message taken (the old one may be gone with its server).
        if self.phase != .idle { self.subscribe() }
        self.syncSticky()
    }

    private func enter(_ phase: ConnectionPhase, _ reason: String) {
        guard phase != self.phase else { return }
        self.phase = phase
        self.phaseSince = WallClock.millisecondsSinceEpoch()
        self.fanout.upstreamLink(self, emitted: .state(phase, reason: reason))
    }

    /// Makes the consumer (on the thread pool: it asks JetStream), from the seq after the last
    /// one numbered, or after the stream's last when nothing was.
    func subscribe() {
        guard let jetStream = self.jetStream, !self.stopped else { return }
        self.retry?.cancel()
        self.dropSubscription()
        let bound = NIOLoopBound(self, eventLoop: self.eventLoop)
        let loop = self.eventLoop
        let incoming = self.incoming
        let library = self.library
        // Only the newest consumer's messages count: an old one (being destroyed, or reset by the
        // client itself) could move the position past what the new one has still to bring.
        self.generation += 1
        let generation = self.generation
        let consumer = NATSMessages { message in
            var taken: [(seq: UInt64, item: Item)] = []
            var streamSeq: UInt64 = 0
            do throws(FleetBatch.Malformed) {
                streamSeq = try Self.take(message, library, into: &taken) ?? 0
            } catch {
                loop.execute { bound.value.malformed(error) }
                return
            }
            guard !taken.isEmpty else { return }
            let schedule = incoming.withLockedValue { box in
                // The loop behind by a whole batch: the rest is taken again from the stream.
                guard box.messages.count < Self.maxIncoming else {
                    box.overflowed = true
                    return false
                }
                for (seq, item) in taken { box.messages.append((generation, seq, item, streamSeq)) }
                defer { box.scheduled = true }
                return !box.scheduled
            }
            if schedule { loop.execute { bound.value.drain() } }
        }
        self.consumer = consumer
        let after = self.fanout.position.seq
        let fleet = self.fleet
        let handle = UnsafeSendable(jetStream)
        NIOThreadPool.singleton.runIfActive(eventLoop: self.eventLoop) { () throws -> (UnsafeSendable<OpaquePointer?>, UInt64, UInt64) in
            var info: UnsafeMutablePointer<jsStreamInfo>?
            var infoCode = jsErrCode(rawValue: 0)
            let read = library.api.js_GetStreamInfo(&info, handle.value, fleet.stream, nil, &infoCode)
            guard read == NATS_OK, let info else {
                throw FleetError("the stream \(fleet.stream): \(library.text(read)) (JetStream error \(infoCode.rawValue))")
            }
            let (first, last) = (info.pointee.State.FirstSeq, info.pointee.State.LastSeq)
            library.api.jsStreamInfo_Destroy(info)
            // With nothing numbered yet: after the stream's last message, at its number.
            let start = after == 0 ? last + 1 : try Self.startSeq(after: after, library, handle.value, fleet.stream, first: first, last: last)
            let skip = after == 0 && last > 0 ? max(last, try library.lastNumber(handle.value, fleet.stream, from: last) ?? last) : 0
            var options = jsSubOptions()
            _ = library.api.jsSubOptions_Init(&options)
            options.Ordered = true
            options.Config.DeliverPolicy = js_DeliverByStartSequence
            options.Config.OptStartSeq = start
            var subscription: OpaquePointer?
            var code = jsErrCode(rawValue: 0)
            let status = fleet.stream.withCString { stream in
                options.Stream = stream
                return library.api.js_Subscribe(&subscription, handle.value, fleet.subject, NATSMessages.callback, consumer.closure, nil, &options, &code)
            }
            guard status == NATS_OK else {
                throw FleetError("following the stream \(fleet.stream) (subject \(fleet.subject)): \(library.text(status)) (JetStream error \(code.rawValue))")
            }
            if let subscription {
                // The client's own bound, not the fan-out's: the loop takes them as they come.
                _ = library.api.natsSubscription_SetPendingLimits(subscription, -1, -1)
            }
            return (UnsafeSendable(subscription), start, skip)
        }.assumeIsolated().whenComplete { result in
            switch result {
            case .success(let (subscription, start, skip)):
                guard self.consumer === consumer, !self.stopped, self.phase != .idle else {
                    Self.destroy(subscription.value, library)
                    return
                }
                self.subscription = subscription.value
                if after == 0, skip > 0 { self.fanout.skip(to: skip) }
                self.lastError = nil
                self.logger.notice("fleet: following the JetStream stream \(self.fleet.stream) (subject \(self.fleet.subject)) from seq \(start)")
                self.enter(.open, "following the stream \(self.fleet.stream) from seq \(start)")
            case .failure(let error):
                guard self.consumer === consumer, !self.stopped else { return }
                let problem = "\(error)"
                if self.lastError != problem { self.logger.error("fleet: \(problem); trying again every second") }
                self.lastError = problem
                self.retry = self.eventLoop.assumeIsolated().scheduleTask(in: .seconds(1)) { self.subscribe() }
            }
        }
    }

    private func dropSubscription() {
        self.consumer = nil
        guard let subscription = self.subscription else { return }
        self.subscription = nil
        let library = self.library
        let handle = UnsafeSendable(subscription)
        NIOThreadPool.singleton.submit { _ in Self.destroy(handle.value, library) }
    }

    private static func destroy(_ subscription: OpaquePointer?, _ library: NATSLibrary) {
        guard let subscription else { return }
        // Unsubscribing deletes the consumer in JetStream too.
        _ = library.api.natsSubscription_Unsubscribe(subscription)
        library.api.natsSubscription_Destroy(subscription)
    }

    func fail(_ description: String) {}

    func keepalive(_ timing: AppProtocolTiming, protocol name: String) {}

    // MARK: - The operator's requests

    func connect() {
        guard self.phase == .idle, !self.stopped else { return }
        self.enter(.connecting, "connect requested")
        if self.natsConnected { self.subscribe() }
    }

    func reconnect() {
        guard !self.stopped else { return }
        self.retry?.cancel()
        self.dropSubscription()
        self.enter(.connecting, "reconnect requested")
        if self.natsConnected { self.subscribe() }
    }

    func close(code: UInt16, reason: String) {
        guard self.phase != .idle, !self.stopped else { return }
        self.retry?.cancel()
        self.dropSubscription()
        self.enter(.idle, reason.isEmpty ? "closed by request" : reason)
    }

    /// The daemon stops: the consumer and the connection go.
    func stop() -> EventLoopFuture<Void> {
        self.stopped = true
        self.stickyTimer?.cancel()
        self.retry?.cancel()
        self.dropSubscription()
        for (_, entry) in self.waiting {
            entry.timeout.cancel()
            entry.promise.succeed(.rejected("wsbridged is stopping"))
        }
        self.waiting.removeAll()
        self.phase = .stopped
        return self.release()
    }

    @discardableResult
    private func release() -> EventLoopFuture<Void> {
        guard let connection = self.connection else { return self.eventLoop.makeSucceededVoidFuture() }
        self.connection = nil
        let handles = UnsafeSendable((connection, self.jetStream, self.answersSubscription))
        self.jetStream = nil
        self.answersSubscription = nil
        let library = self.library
        let owners = UnsafeSendable((self.handlers, self.answers))
        return NIOThreadPool.singleton.runIfActive(eventLoop: self.eventLoop) {
            let (connection, jetStream, answers) = handles.value
            library.close(connection, jetStream: jetStream)
            if let answers { library.api.natsSubscription_Destroy(answers) }
            withExtendedLifetime(owners) {}
        }
    }

    // MARK: - Status

    var status: StatusReport {
        var report = StatusReport()
        report.state = self.phase
        report.since = self.phaseSince
        // The server it is connected to (the client moves among the cluster's).
        let server = self.connection.flatMap { self.natsConnected ? self.library.connectedURL($0) : nil }
        report.url = server ?? self.fleet.servers.joined(separator: ", ")
        report.traffic = self.traffic
        report.lastError = self.lastError
        report.fleet = StatusReport.Fleet(
            state: self.natsConnected ? "connected" : self.stopped ? "closed" : "connecting", stream: self.fleet.stream, subject: self.fleet.subject,
            acknowledged: 0, acknowledgedThrough: 0, lag: 0, inFlight: self.waiting.count, waiting: 0, lost: 0, lastError: self.lastError)
        report.fleet?.role = "follower"
        report.fleet?.server = server
        report.fleet?.received = self.received
        report.fleet?.streamSeq = self.streamSeq ?? self.fanout.position.seq
        report.fleet?.forwarded = self.forwarded
        report.fleet?.stalledSeconds = self.stalledSeconds
        return report
    }
}

@available(*, unavailable)
extension FleetFollower: Sendable {}
