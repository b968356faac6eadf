import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// The session the daemon restores on every open, for every local client (docs/sessions.md):
///
/// 1. the opening messages (`upstream.on_open`), placeholders filled in at that moment;
/// 2. the ready gate (`upstream.ready_when`): the link counts as open only once an upstream
///    message matches;
/// 3. the sticky sends local clients registered, in the order their keys were first registered;
///
/// then the link flushes its queued sends and takes new ones. The link asks for each step
/// (`opening`, `observe`, `becameReady`); the local plane registers and releases sticky keys.
/// It holds neither: each hands it what it needs. Confined to the link's event loop.
final class UpstreamSession {
    private var settings: Configuration.Upstream
    private(set) var registry: StickyRegistry
    private var lastValues: LastValues
    /// Keeps the daemon-scope keys across restarts (with `queue.spool`).
    private let store: StickyStore?
    /// The registry's `daemonRevision` the file holds or is being written with (nil after a
    /// failed write: the next change writes it whatever it holds). A change that leaves the
    /// daemon-scope keys alone writes nothing.
    private var storedRevision: UInt64? = 0
    /// Changes waiting for the next write, which carries them all (one write at a time).
    private var unsaved: [EventLoopPromise<Void>] = []
    private var saving = false
    private let eventLoop: any EventLoop
    private let logger: Logger
    /// The last upstream message while the link waited for `ready_when`: shown when the wait fails.
    private var lastSeen: ByteBuffer?

    init(
        configuration: Configuration, store: StickyStore? = nil, restored: [StickyRegistry.Entry] = [], eventLoop: any EventLoop, logger: Logger
    ) {
        self.settings = configuration.upstream
        self.registry = StickyRegistry(limits: Self.limits(configuration.local))
        self.registry.restore(restored)
        self.lastValues = LastValues(paths: configuration.upstream.onOpen.flatMap(\.lastPaths))
        self.store = store
        self.eventLoop = eventLoop
        self.logger = logger
        if !restored.isEmpty {
            logger.notice("restored \(self.registry.count) daemon-scope sticky key(s) from \(store?.path ?? "the spool directory")")
        }
    }

    private static func limits(_ local: Configuration.Local) -> StickyRegistry.Limits {
        .init(keysPerClient: local.stickyKeysPerClient, keys: local.stickyKeys, bytes: local.stickyBytes)
    }

    func update(configuration: Configuration) {
        if configuration.upstream.onOpen.flatMap(\.lastPaths) != self.settings.onOpen.flatMap(\.lastPaths) {
            let old = self.lastValues.values
            self.lastValues = LastValues(paths: configuration.upstream.onOpen.flatMap(\.lastPaths))
            // Values already seen for paths that stay are kept.
            self.lastValues.keep(old)
        }
        self.settings = configuration.upstream
        self.registry.limits = Self.limits(configuration.local)
    }

    var readyWhen: Filter? { self.settings.readyWhen }
    var readyTimeout: Duration { self.settings.readyTimeout }

    // MARK: - The link's side

    /// Whether the link must show this session each upstream message (`awaitingReady`: the
    /// link waits for the message matching `ready_when`).
    func observes(awaitingReady: Bool) -> Bool { awaitingReady || !self.lastValues.isEmpty }

    /// The opening messages for a link that just upgraded, and, with a ready gate, the start of
    /// the wait. `token`: the content of `auth.token_file` read for this connection.
    func opened(token: String?) -> [OutboundMessage] {
        self.lastValues.resolve()
        self.lastSeen = nil
        let values = self.lastValues.values
        return self.settings.onOpen.map { template in
            OutboundMessage(.text(template.render(token: token, last: { values[$0] })))
        }
    }

    /// An upstream message. Returns true when it is the one that makes a waiting link ready.
    func observe(_ message: UpstreamMessage, awaitingReady: Bool) -> Bool {
        guard message.kind == .text else {
            guard awaitingReady else { return false }
            self.lastSeen = message.data
            // A whole-text gate reads a text protocol's binary messages too (NATS's).
            guard let gate = self.settings.readyWhen, gate.wholeText != nil else { return false }
            return gate.matches(json: nil, text: message.data.readableBytesView)
        }
        if !self.lastValues.isEmpty { self.lastValues.observe(message.data) }
        guard awaitingReady, let gate = self.settings.readyWhen else { return false }
        self.lastSeen = message.data
        if gate.wholeText != nil { return gate.matches(json: nil, text: message.data.readableBytesView) }
        guard let json = try? JSONValue.parse(message.data.readableBytesView), gate.matches(json) else { return false }
        return true
    }

    /// The socket read is done: the last values are settled once per read, not per message.
    func readComplete() {
        self.lastValues.resolve()
    }

    /// With a pool (`upstream.subscriptions_per_connection`): which connection (its slot) each
    /// sticky key is on. nil: one connection has them all.
    var placement: [String: Int]?

    /// The sticky keys connection `slot` restores, in registration order.
    func entries(slot: Int) -> [StickyRegistry.Entry] {
        guard let placement = self.placement else { return self.registry.ordered }
        return self.registry.ordered.filter { placement[$0.key] == slot }
    }

    /// The link is open (ready): the sticky sends (of connection `slot`'s keys), in registration order.
    func becameReady(slot: Int = 0) -> [OutboundMessage] {
        self.lastSeen = nil
        let ordered = self.entries(slot: slot)
        if let last = ordered.last {
            self.lastSentBySlot[slot] =
                "sticky key \"\(last.key)\" (held by \(last.holds.map(Self.who).joined(separator: ", "))): \(Self.preview(last.payload))"
        } else if let opening = self.settings.onOpen.last {
            self.lastSentBySlot[slot] = "the opening message (upstream.on_open) \(String(opening.template.prefix(200)))"
        }
        return ordered.map { OutboundMessage($0.payload) }
    }

    /// What this session sent last on connection `slot` (its last sticky key, else its last
    /// opening message): what a close right after open is laid at.
    func lastSent(slot: Int = 0) -> String? { self.lastSentBySlot[slot] }
    private var lastSentBySlot: [Int: String] = [:]

    /// What the server closed each connection (by slot) after, right after open, last; gone once
    /// that connection is stable.
    private(set) var culprits: [Int: String] = [:]

    /// What the server closed a connection after, right after open, last: the first
    /// connection's, else the next one's that has one.
    var culprit: String? { self.culprits.min { $0.key < $1.key }?.value }

    /// Connection `slot` was closed right after open on `culprit` (nil: it is stable, or gone).
    func blame(_ culprit: String?, slot: Int) {
        self.culprits[slot] = culprit
    }

    private static func preview(_ payload: Payload) -> String {
        switch payload {
        case .text(let t): t.utf8.count <= 200 ? t : String(decoding: t.utf8.prefix(200), as: UTF8.self) + "…"
        case .binary(let b): "[\(b.count) bytes, binary]"
        }
    }

    /// Connection `slot` went down (or its attempt failed).
    func ended(slot: Int = 0) {
        self.lastSentBySlot[slot] = nil
        self.lastSeen = nil
        self.lastValues.resolve()
    }

    /// Why a wait failed, with the last upstream message's first 200 bytes.
    func notReadyDetail(after timeout: Duration) -> String {
        let gate = self.settings.readyWhen?.text ?? "?"
        let last: String
        if let seen = self.lastSeen {
            var preview = seen
            let bytes = preview.readBytes(length: min(200, preview.readableBytes)) ?? []
            let text = String(decoding: bytes, as: UTF8.self)
            last = "the last upstream message was \(text.debugDescription)\(seen.readableBytes > 200 ? " (first 200 of \(seen.readableBytes) bytes)" : "")"
        } else {
            last = "no upstream message arrived"
        }
        return
            "not ready: no upstream message matched upstream.ready_when = \(ConfigurationError.tomlString("\(gate)")) within \(timeout.short) (upstream.ready_timeout); \(last); check upstream.on_open (the login) against what the upstream answers, or raise upstream.ready_timeout"
    }

    // MARK: - The local plane's side

    /// Registers a sticky send. The result says whether its text is due upstream now.
    func register(_ options: StickyOptions, payload: Payload, client: Int, pid: Int32?, uid: UInt32?) -> Result<
        (StickyRegistry.Registered, holders: Int), ProtocolError
    > {
        let holder: StickyRegistry.Holder = options.scope == .daemon ? .daemon : .client(client)
        let result = self.registry.register(
            key: options.key, payload: payload, onUnstick: options.onUnstick, holder: holder, pid: pid, uid: uid,
            nowMillis: WallClock.millisecondsSinceEpoch())
        switch result {
        case .success(let r):
            return .success(r)
        case .failure(let error):
            return .failure(Self.describe(error, key: options.key))
        }
    }

    /// Lets go of a key. `.removed(leave)` means the key went and `leave` is due upstream.
    func release(key: String, client: Int, scope: StickyScope?, leave: String?) -> Result<StickyRegistry.Released, ProtocolError> {
        switch self.registry.release(key: key, client: client, scope: scope, leave: leave) {
        case .success(let r):
            return .success(r)
        case .failure(.unknownKey):
            let known = self.registry.ordered.map(\.key)
            let hint = Suggestion.closest(to: key, in: known).map { " (did you mean \"\($0)\"?)" } ?? ""
            return .failure(ProtocolError(.unknownKey, "no sticky key \"\(key)\"\(hint): `wsbridgectl sticky` lists them"))
        case .failure(.notHolder(let hold)):
            return .failure(
                ProtocolError(
                    .stickyConflict,
                    "sticky key \"\(key)\" is held by \(Self.who(hold)) with scope client, not by this connection: it goes when that client unsticks it or disconnects"
                ))
        }
    }

    /// A client went: the keys that went with it, and their leave texts, in registration order.
    func clientGone(_ client: Int) -> [(key: String, leave: OutboundMessage?)] {
        self.registry.clientGone(client).map { gone in (gone.key, gone.leave.map { OutboundMessage(.text($0)) }) }
    }

    /// Stores the daemon-scope keys if they changed (with `queue.spool`): the future succeeds
    /// once the change is on disk; nil when there is nothing to store. Writes do not pile up:
    /// one is on its way at a time, and the next carries every change made meanwhile.
    func persistChanges() -> EventLoopFuture<Void>? {
        guard self.store != nil, self.registry.daemonRevision != self.storedRevision else { return nil }
        self.storedRevision = self.registry.daemonRevision
        let promise = self.eventLoop.makePromise(of: Void.self)
        self.unsaved.append(promise)
        if !self.saving { self.save() }
        return promise.futureResult
    }

    private func save() {
        guard let store = self.store, !self.unsaved.isEmpty else {
            self.saving = false
            return
        }
        self.saving = true
        let batch = self.unsaved
        self.unsaved = []
        // The keys as they are now: this write carries every change made before it starts.
        let file = StickyStore.encode(self.registry.daemonScoped)
        store.save(file).hop(to: self.eventLoop).assumeIsolated().whenComplete { result in
            if case .failure(let error) = result {
                self.logger.error("cannot store the daemon-scope sticky keys in \(store.path): \(error)")
                // Not on disk: the next change writes the whole file again, whatever it holds.
                self.storedRevision = nil
            }
            for promise in batch { promise.completeWith(result) }
            self.save()
        }
    }

    /// `status`'s session part: `ready` is `waiting`, `ready` or `down`, as the link says.
    func status(ready: String) -> StatusReport.Session {
        StatusReport.Session(
            openingMessages: self.settings.onOpen.count,
            readyWhen: self.settings.readyWhen?.text,
            ready: ready,
            stickyKeys: self.registry.count,
            stickyBytes: self.registry.bytes,
            culprit: self.culprit
        )
    }

    /// The `sticky` op's answer.
    var list: StickyListResult {
        StickyListResult(
            keys: self.registry.ordered.map { e in
                let preview: String
                switch e.payload {
                case .text(let t): preview = t.utf8.count <= 200 ? t : String(decoding: t.utf8.prefix(200), as: UTF8.self) + "…"
                case .binary(let b): preview = "[\(b.count) bytes, binary]"
                }
                return .init(
                    key: e.key, bytes: e.bytes, preview: preview, onUnstick: e.onUnstick != nil, since: e.sinceMillis,
                    holders: e.holds.map { .init(scope: $0.holder.scope, pid: $0.pid, uid: $0.uid, since: $0.sinceMillis) })
            })
    }

    private static func who(_ hold: StickyRegistry.Hold) -> String {
        switch hold.holder {
        case .daemon: "the daemon (scope daemon, registered by pid \(hold.pid.map(String.init) ?? "?"))"
        case .client: "pid \(hold.pid.map(String.init) ?? "?") (uid \(hold.uid.map(String.init) ?? "?"))"
        }
    }

    private static func describe(_ error: StickyRegistry.RegisterError, key: String) -> ProtocolError {
        switch error {
        case .conflict(let hold):
            return ProtocolError(
                .stickyConflict,
                "sticky key \"\(key)\" is held by \(Self.who(hold)) with a different text: send the same text to share it, or use another key")
        case .tooManyForClient(let limit):
            return ProtocolError(
                .stickyLimit, "this client already holds local.sticky_keys_per_client = \(limit) sticky keys: unstick one, or raise the setting")
        case .tooManyKeys(let limit):
            return ProtocolError(.stickyLimit, "local.sticky_keys = \(limit) sticky keys are registered in all: unstick some, or raise the setting")
        case .tooManyBytes(let limit, let used, let needed):
            return ProtocolError(
                .stickyLimit,
                "sticky keys hold \(used) of local.sticky_bytes = \(limit) bytes and this one needs \(needed): unstick some, send less, or raise the setting"
            )
        }
    }
}

@available(*, unavailable)
extension UpstreamSession: Sendable {}
