import CNATS
import Foundation
import Logging
import NIOCore
import NIOPosix
import WSBridgeCore

/// `fleet.standby` (docs/fleet.md): which of the bridges of a stream leads, by a lease in a
/// JetStream key-value bucket (`fleet.lease_bucket`, made if missing, its values kept
/// `fleet.lease_ttl`), under the stream's name. The leader holds the key and renews it three
/// times a lease (an update that expects the revision it wrote last: no one else's write in
/// between); the others try to create it as often, which succeeds only once the key is gone: its
/// leader stopped renewing for a whole lease (killed, cut off), or gave it up (a clean stop). A
/// leader that finds someone else's value there has lost it (cut off past a lease) and stands by.
/// A leader that cannot reach NATS at all keeps leading: then no one else can take over either,
/// and its own apps keep their feed. Confined to the daemon's event loop.
final class FleetLease {
    enum Outcome: Sendable {
        case leading(revision: UInt64)
        /// Held by `holder` (nil: gone between the create and the read; tried again).
        case heldBy(String?)
        case unreachable(String)
    }

    private let fleet: Configuration.Fleet
    private let library: NATSLibrary
    private let eventLoop: any EventLoop
    private let logger: Logger
    /// This bridge's name in the lease: host and process.
    let holder: String
    /// Told when this bridge starts leading (with the one it took over from, if known) or stops.
    var changed: ((_ leading: Bool, _ previous: String?) -> Void)?
    private var jetStream: OpaquePointer?
    private var store: OpaquePointer?
    private var revision: UInt64?
    private(set) var leading = false
    /// Who holds the lease, as last read.
    private(set) var heldBy: String?
    private(set) var lastError: String?
    private var timer: Scheduled<Void>?
    private var stopped = false

    init(fleet: Configuration.Fleet, library: NATSLibrary, holder: String, eventLoop: any EventLoop, logger: Logger) {
        self.fleet = fleet
        self.library = library
        self.holder = holder
        self.eventLoop = eventLoop
        self.logger = logger
    }

    /// Starts (again) once the publisher's JetStream context is up.
    func start(jetStream: OpaquePointer) {
        guard !self.stopped, self.jetStream == nil else { return }
        self.jetStream = jetStream
        self.tick()
    }

    private var every: TimeAmount { .nanoseconds(self.fleet.leaseTTL.nanoseconds / 3) }

    private func tick() {
        guard let jetStream = self.jetStream, !self.stopped else { return }
        let library = self.library
        let fleet = self.fleet
        let holder = self.holder
        let handles = UnsafeSendable((jetStream, self.store))
        let revision = self.revision
        NIOThreadPool.singleton.runIfActive(eventLoop: self.eventLoop) { () -> (UnsafeSendable<OpaquePointer?>, Outcome) in
            var store = handles.value.1
            if store == nil {
                do {
                    store = try Self.bucket(library, jetStream: handles.value.0, fleet)
                } catch {
                    return (UnsafeSendable(nil), .unreachable("\(error)"))
                }
            }
            guard let store else { return (UnsafeSendable(nil), .unreachable("no key-value bucket")) }
            return (UnsafeSendable(store), Self.claim(library, store, key: fleet.stream, holder: holder, revision: revision))
        }.assumeIsolated().whenComplete { result in
            guard !self.stopped else { return }
            switch result {
            case .success(let (store, outcome)):
                if self.store == nil { self.store = store.value }
                self.settle(outcome)
            case .failure(let error):
                self.settle(.unreachable("\(error)"))
            }
            self.timer = self.eventLoop.assumeIsolated().scheduleTask(in: self.every) { self.tick() }
        }
    }

    private func settle(_ outcome: Outcome) {
        switch outcome {
        case .leading(let revision):
            self.revision = revision
            self.lastError = nil
            let previous = self.heldBy
            self.heldBy = self.holder
            guard !self.leading else { return }
            self.leading = true
            self.logger.notice("fleet: this bridge leads stream \(self.fleet.stream) (its lease in \(self.fleet.leaseBucket)), after \(previous ?? "no one")")
            self.changed?(true, previous)
        case .heldBy(let holder):
            self.revision = nil
            self.lastError = nil
            if let holder { self.heldBy = holder }
            guard self.leading else { return }
            self.leading = false
            self.logger.warning("fleet: the lease of stream \(self.fleet.stream) is \(holder ?? "someone else")'s now: this bridge stands by")
            self.changed?(false, holder)
        case .unreachable(let why):
            if self.lastError != why { self.logger.warning("fleet: the lease: \(why)") }
            self.lastError = why
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
        let made = fleet.leaseBucket.withCString { bucket in
            config.Bucket = bucket
            return api.js_CreateKeyValue(&store, jetStream, &config)
        }
        try library.check(made, "the lease bucket \(fleet.leaseBucket) (make it: nats kv add \(fleet.leaseBucket) --ttl \(fleet.leaseTTL.short))")
        return store
    }

    /// Renews the lease (it wrote `revision` last) or takes it if no one holds it; else reads who
    /// does (blocks: on the thread pool).
    private static func claim(_ library: NATSLibrary, _ store: OpaquePointer, key: String, holder: String, revision: UInt64?) -> Outcome {
        let api = library.api
        var written: UInt64 = 0
        let status =
            if let revision {
                api.kvStore_Update(&written, store, key, holder, Int32(holder.utf8.count), revision)
            } else {
                api.kvStore_Create(&written, store, key, holder, Int32(holder.utf8.count))
            }
        if status == NATS_OK { return .leading(revision: written) }
        var entry: OpaquePointer?
        let read = api.kvStore_Get(&entry, store, key)
        defer { if let entry { api.kvEntry_Destroy(entry) } }
        if read == NATS_NOT_FOUND { return .heldBy(nil) }
        guard read == NATS_OK, let entry else { return .unreachable("reading the lease: \(library.text(read)) (writing it: \(library.text(status)))") }
        let value = api.kvEntry_ValueString(entry).map { String(cString: $0) } ?? ""
        // Its own value at another revision: a renewal whose answer was lost. It still leads.
        if value == holder { return .leading(revision: api.kvEntry_Revision(entry)) }
        return .heldBy(value)
    }

    /// The daemon stops: a leader gives the lease up, so a standby takes over at once.
    func stop() -> EventLoopFuture<Void> {
        self.stopped = true
        self.timer?.cancel()
        guard let store = self.store else { return self.eventLoop.makeSucceededVoidFuture() }
        self.store = nil
        let leading = self.leading
        let library = self.library
        let key = self.fleet.stream
        let handle = UnsafeSendable(store)
        return NIOThreadPool.singleton.runIfActive(eventLoop: self.eventLoop) {
            if leading { _ = library.api.kvStore_Delete(handle.value, key) }
            library.api.kvStore_Destroy(handle.value)
        }
    }

    /// `status`'s words for it: `leading`, `standing by for NAME`, or why it cannot tell.
    var state: String {
        if self.leading { return "leading" }
        if let heldBy = self.heldBy { return "standing by for \(heldBy)" }
        return self.lastError.map { "unknown: \($0)" } ?? "standing by"
    }
}

@available(*, unavailable)
extension FleetLease: Sendable {}
