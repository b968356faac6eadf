import CNATS
import Foundation
import Logging
import NIOCore
import NIOPosix
import WSBridgeCore

/// `fleet.standby` (docs/fleet.md): which of the bridges of a stream leads, by a lease in a
/// JetStream key-value bucket (`fleet.lease_bucket`, made if missing, its values kept
/// `fleet.lease_ttl`), under the stream's name. `FleetLeaseMachine` decides (a leader stands down
/// only on another's name; a standby takes the key only after reading it absent for twice a
/// lease, or at once when released); this does its reads and writes, three times a lease, on the
/// thread pool, each waiting at most a third of a lease for the bucket's answer (so a leader back
/// from an outage writes its key again well within a standby's grace). Confined to the daemon's
/// event loop.
final class FleetLease {
    private let fleet: Configuration.Fleet
    private let library: NATSLibrary
    private let eventLoop: any EventLoop
    private let logger: Logger
    /// This bridge's name in the lease: host and process.
    var holder: String { self.machine.holder }
    /// Told when this bridge starts leading (with the one it took over from, if known) or stops.
    var changed: ((FleetLeaseMachine.Change) -> Void)?
    /// Told when a leader's lease is written (again): what it publishes waits for it after each
    /// NATS reconnect.
    var confirmed: (() -> Void)?
    private var machine: FleetLeaseMachine
    private var jetStream: OpaquePointer?
    private var store: OpaquePointer?
    private var timer: Scheduled<Void>?
    /// An action is on the thread pool: the next waits for it.
    private var busy = false
    private var stopped = false

    var leading: Bool { self.machine.leading }
    /// Leading, its lease written since NATS last came back.
    var confirmedLeading: Bool { self.machine.leading && self.machine.confirmed }

    init(fleet: Configuration.Fleet, library: NATSLibrary, holder: String, eventLoop: any EventLoop, logger: Logger) {
        self.fleet = fleet
        self.library = library
        self.machine = FleetLeaseMachine(holder: holder, grace: fleet.leaseTTL * 2)
        self.eventLoop = eventLoop
        self.logger = logger
    }

    /// Starts once the publisher's connection is up, and is told again after each reconnect:
    /// its own JetStream context (the bucket's answers waited for a third of a lease).
    func start(connection: OpaquePointer) {
        guard !self.stopped else { return }
        self.machine.reconnected()
        guard self.jetStream == nil else {
            self.tickSoon()
            return
        }
        var options = jsOptions()
        _ = self.library.api.jsOptions_Init(&options)
        options.Wait = max(200, self.fleet.leaseTTL.nanoseconds / 3_000_000)
        var jetStream: OpaquePointer?
        let made = self.library.api.natsConnection_JetStream(&jetStream, connection, &options)
        guard made == NATS_OK, let jetStream else {
            self.logger.error("fleet: the lease's JetStream context: \(self.library.text(made))")
            return
        }
        self.jetStream = jetStream
        self.tickSoon()
    }

    private var every: TimeAmount { .nanoseconds(self.fleet.leaseTTL.nanoseconds / 3) }

    private static var now: MonotonicInstant { MonotonicInstant(nanoseconds: UInt64(NIODeadline.now().uptimeNanoseconds)) }

    /// The next tick now (NATS came back), unless an action is on its way.
    private func tickSoon() {
        guard !self.busy else { return }
        self.timer?.cancel()
        self.tick()
    }

    private func tick() {
        guard !self.stopped, self.jetStream != nil else { return }
        self.perform(self.machine.tick(now: Self.now))
    }

    /// Does `action` on the thread pool (a write, and a read when it did not go through), then
    /// what the machine says to do next, or waits for the next tick.
    private func perform(_ action: FleetLeaseMachine.Action) {
        guard action != .none, let jetStream = self.jetStream else {
            self.timer = self.eventLoop.assumeIsolated().scheduleTask(in: self.every) { self.tick() }
            return
        }
        self.busy = true
        let library = self.library
        let fleet = self.fleet
        let holder = self.holder
        let handles = UnsafeSendable((jetStream, self.store))
        NIOThreadPool.singleton.runIfActive(eventLoop: self.eventLoop) { () -> (UnsafeSendable<OpaquePointer?>, FleetLeaseMachine.Observation) in
            var store = handles.value.1
            if store == nil {
                do {
                    store = try Self.bucket(library, jetStream: handles.value.0, fleet)
                } catch {
                    return (UnsafeSendable(nil), .unreachable("\(error)"))
                }
            }
            guard let store else { return (UnsafeSendable(nil), .unreachable("no key-value bucket")) }
            return (UnsafeSendable(store), Self.act(action, library, store, handles.value.0, bucket: fleet.leaseBucket, key: fleet.stream, holder: holder))
        }.assumeIsolated().whenComplete { result in
            self.busy = false
            guard !self.stopped else { return }
            let observation: FleetLeaseMachine.Observation
            switch result {
            case .success(let (store, seen)):
                if self.store == nil { self.store = store.value }
                observation = seen
            case .failure(let error):
                observation = .unreachable("\(error)")
            }
            let wasConfirmed = self.confirmedLeading
            let lastError = self.machine.lastError
            let (change, next) = self.machine.observed(observation, now: Self.now)
            if case .unreachable(let why) = observation, lastError != why {
                self.logger.warning(
                    "fleet: the lease: \(why) (\(self.leading ? "this bridge leads on: only another's name in the lease stands it down" : "standing by"))")
            }
            switch change {
            case .startedLeading(let previous):
                self.logger.notice(
                    "fleet: this bridge leads stream \(self.fleet.stream) (its lease in \(self.fleet.leaseBucket)), after \(previous ?? "no one")")
                self.changed?(.startedLeading(previous: previous))
            case .stoppedLeading(let holder):
                self.logger.warning("fleet: the lease of stream \(self.fleet.stream) is \(holder)'s now: this bridge stands by")
                self.changed?(.stoppedLeading(holder: holder))
            case nil:
                break
            }
            if !wasConfirmed && self.confirmedLeading { self.confirmed?() }
            self.perform(next)
        }
    }

    /// The bucket, made when missing (blocks: on the thread pool).
    private static func bucket(_ library: NATSLibrary, jetStream: OpaquePointer, _ fleet: Configuration.Fleet) throws -> OpaquePointer? {
        let api = library.api
        var store: OpaquePointer?
        let found = api.js_KeyValue(&store, jetStream, fleet.leaseBucket)
        if found == NATS_OK { return store }
        var config = kvConfig()
        _ = api.kvConfig_Init(&config)
        config.History = 1
        config.TTL = fleet.leaseTTL.nanoseconds
        config.Replicas = Int32(fleet.replicas)
        let made = fleet.leaseBucket.withCString { bucket in
            config.Bucket = bucket
            return api.js_CreateKeyValue(&store, jetStream, &config)
        }
        try library.check(made, "the lease bucket \(fleet.leaseBucket) (make it: wsbridged --fleet-init)")
        return store
    }

    /// `action` against the bucket (blocks: on the thread pool): its write, and when that did not
    /// go through, a read of who holds the key.
    private static func act(
        _ action: FleetLeaseMachine.Action, _ library: NATSLibrary, _ store: OpaquePointer, _ jetStream: OpaquePointer, bucket: String, key: String,
        holder: String
    )
        -> FleetLeaseMachine.Observation
    {
        let api = library.api
        var written: UInt64 = 0
        let status: natsStatus?
        switch action {
        case .renew(let revision), .take(let revision?):
            status = api.kvStore_Update(&written, store, key, holder, Int32(holder.utf8.count), revision)
        case .take(nil):
            status = api.kvStore_Create(&written, store, key, holder, Int32(holder.utf8.count))
        case .read, .none:
            status = nil
        }
        if status == NATS_OK { return .written(revision: written) }
        return Self.read(library, jetStream, bucket: bucket, key: key, writing: status)
    }

    /// Who holds the key, read from the bucket's stream leader (blocks: on the thread pool). Not
    /// `kvStore_Get`: a bucket made by the client allows direct gets, which any replica answers,
    /// and a replica still catching up (a node just restarted, whose copy of the key ran out of
    /// `lease_ttl` while it was away) answers "no key" while the leader holds a live lease. A
    /// standby that read that for a grace took the lease from a live leader (FleetFaultTests,
    /// the lease bucket's leader node killed). The leader's answer is the one the writes are
    /// checked against.
    private static func read(_ library: NATSLibrary, _ jetStream: OpaquePointer, bucket: String, key: String, writing: natsStatus?)
        -> FleetLeaseMachine.Observation
    {
        let api = library.api
        var message: OpaquePointer?
        var code = jsErrCode(rawValue: 0)
        let read = api.js_GetLastMsg(&message, jetStream, "KV_\(bucket)", "$KV.\(bucket).\(key)", nil, &code)
        defer { if let message { api.natsMsg_Destroy(message) } }
        if read == NATS_NOT_FOUND || code == jsErrCode(rawValue: 10037) { return .missing }
        guard read == NATS_OK, let message else {
            let writing = writing.map { " (writing it: \(library.text($0)))" } ?? ""
            return .unreachable("reading the lease: \(library.text(read))\(writing)")
        }
        // A deleted or purged key leaves a marker with an operation header.
        if library.header("KV-Operation", of: message) != nil { return .missing }
        let length = Int(api.natsMsg_GetDataLength(message))
        let value = api.natsMsg_GetData(message).map { String(decoding: UnsafeRawBufferPointer(start: $0, count: length), as: UTF8.self) } ?? ""
        return .held(by: value, revision: api.natsMsg_GetSequence(message))
    }

    /// The daemon stops: a leader releases the lease (an empty name at its revision), so a standby
    /// takes over at once.
    func stop() -> EventLoopFuture<Void> {
        self.stopped = true
        self.timer?.cancel()
        guard let store = self.store else { return self.eventLoop.makeSucceededVoidFuture() }
        self.store = nil
        let revision = self.machine.leading ? self.machine.revision : nil
        let library = self.library
        let key = self.fleet.stream
        let handles = UnsafeSendable((store, self.jetStream))
        self.jetStream = nil
        return NIOThreadPool.singleton.runIfActive(eventLoop: self.eventLoop) {
            var written: UInt64 = 0
            if let revision { _ = library.api.kvStore_Update(&written, handles.value.0, key, "", 0, revision) }
            library.api.kvStore_Destroy(handles.value.0)
            if let jetStream = handles.value.1 { library.api.jsCtx_Destroy(jetStream) }
        }
    }

    /// `status`'s words for it: `leading`, `standing by for NAME`, or why it cannot tell.
    var state: String { self.machine.state }
}

@available(*, unavailable)
extension FleetLease: Sendable {}
