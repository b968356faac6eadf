import CNATS
import Foundation
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// A follower's apps' sends go to the bridge as NATS requests on `fleet.requests` (docs/fleet.md):
/// one inbox, a subject per send, the bridge's answer (its outcome) the app's reply.
extension FleetFollower {
    func send(_ message: OutboundMessage) -> SendOutcome {
        self.send(message, app: nil)
    }

    /// `app`: with upstream.protocol, the app it is from (the bridge's layer holds it);
    /// `header`: what it is besides a send (`Wsbridge-Sticky` or `Wsbridge-Unstick`, a key).
    func send(_ message: OutboundMessage, app: AppID?, header: (String, String)? = nil) -> SendOutcome {
        guard let connection = self.connection, self.natsConnected else {
            return .rejected(
                "this follower is not connected to NATS (\(self.lastError ?? "connecting")), so its bridge cannot be reached: retry once status says open")
        }
        guard self.waiting.count < self.fleet.maxInFlight else {
            return .rejected(
                "\(self.waiting.count) sends wait for the bridge's answer already (fleet.max_in_flight = \(self.fleet.maxInFlight)): wait for their replies, then send again"
            )
        }
        self.nextSend += 1
        let id = self.nextSend
        let promise = self.eventLoop.makePromise(of: SendOutcome.self)
        var msg: OpaquePointer?
        let length = message.data.readableBytes
        let made = message.data.withUnsafeReadableBytes { bytes in
            self.library.api.natsMsg_Create(
                &msg, self.fleet.requests, "\(self.inbox).\(id)", bytes.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(length))
        }
        guard made == NATS_OK, let msg else { return .rejected("a message for the bridge: \(self.library.text(made))") }
        defer { self.library.api.natsMsg_Destroy(msg) }
        if message.kind == .binary { _ = self.library.api.natsMsgHeader_Set(msg, FleetPublisher.kindHeader, "binary") }
        if let app {
            _ = self.library.api.natsMsgHeader_Set(msg, FleetPublisher.appHeader, "\(self.holder)/\(app)")
            self.remoteApps.insert(app)
        }
        if let (name, value) = header { _ = self.library.api.natsMsgHeader_Set(msg, name, value) }
        let status = self.library.api.natsConnection_PublishMsg(connection, msg)
        guard status == NATS_OK else { return .rejected("sending to the bridge: \(self.library.text(status))") }
        let wait = self.fleet.ackTimeout
        let timeout = self.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(wait.nanoseconds)) {
            guard let entry = self.waiting.removeValue(forKey: id) else { return }
            entry.promise.succeed(
                .rejected(
                    "no bridge answered on \(self.fleet.requests) within fleet.ack_timeout (\(wait.short)): is a bridge of stream \(self.fleet.stream) running? The message may or may not have gone upstream"
                ))
        }
        self.waiting[id] = (promise, timeout)
        self.traffic.sent(bytes: length)
        return .spooling(promise.futureResult)
    }

    /// The bridge's answer to send number N (the last token of its subject).
    func answered(_ message: UnsafeSendable<OpaquePointer>) {
        let api = self.library.api
        defer { api.natsMsg_Destroy(message.value) }
        let subject = api.natsMsg_GetSubject(message.value).map { String(cString: $0) } ?? ""
        guard let id = subject.split(separator: ".").last.flatMap({ UInt64($0) }), let entry = self.waiting.removeValue(forKey: id) else { return }
        entry.timeout.cancel()
        let outcome = FleetPublisher.outcome(ofAnswer: self.library.data(of: message.value))
        if case .rejected = outcome {} else { self.forwarded += 1 }
        entry.promise.succeed(outcome)
    }

    /// Tells the bridge this follower's sticky set: every key its apps hold, with its text and
    /// leave text, on `fleet.requests` (header `Wsbridge-Sticky-Set: HOLDER`, no answer). The
    /// bridge holds what is in it for this follower and lets go of what is not.
    func syncSticky() {
        guard let connection = self.connection, self.natsConnected else { return }
        let entries = self.session.registry.ordered
        // (With apps at the bridge's protocol layer, it is what tells the bridge this follower lives.)
        guard !entries.isEmpty || self.stickyShared || !self.remoteApps.isEmpty else { return }
        self.stickyShared = !entries.isEmpty
        let set: JSONValue = .array(
            entries.map { entry in
                var fields: [(String, JSONValue)] = [("key", .string(entry.key))]
                switch entry.payload {
                case .text(let text): fields.append(("text", .string(text)))
                case .binary(let bytes): fields.append(("binary", .string(Data(bytes).base64EncodedString())))
                }
                if let leave = entry.onUnstick { fields.append(("on_unstick", .string(leave))) }
                return .object(fields)
            })
        let body = set.serialized
        var msg: OpaquePointer?
        guard self.library.api.natsMsg_Create(&msg, self.fleet.requests, nil, body, Int32(body.utf8.count)) == NATS_OK, let msg else { return }
        defer { self.library.api.natsMsg_Destroy(msg) }
        _ = self.library.api.natsMsgHeader_Set(msg, FleetPublisher.stickySetHeader, self.holder)
        if let layer = self.protocolLayer { _ = self.library.api.natsMsgHeader_Set(msg, FleetPublisher.protocolHeader, layer.session.name) }
        _ = self.library.api.natsConnection_PublishMsg(connection, msg)
    }

    /// A sticky key registered (the bridge is told of the set, and sends it upstream if it is new
    /// there), or a leave text (its key just went: upstream through the bridge, as a send).
    func sendAhead(_ message: OutboundMessage, key: String?) -> Bool {
        guard self.natsConnected else { return false }
        if let key, self.session.registry.entry(key) != nil {
            self.syncSticky()
        } else {
            _ = self.send(message)
        }
        return true
    }

    /// A sticky key went: the bridge lets go of it for this follower.
    func released(key: String) {
        self.syncSticky()
    }
}

/// With upstream.protocol: this host's apps are apps of the bridge's protocol layer.
extension FleetFollower: RemoteProtocolApps {
    func fromApp(_ app: AppID, _ text: String) -> AppProtocolLayer.Performed {
        AppProtocolLayer.Performed(sent: self.send(OutboundMessage(.text(text)), app: app))
    }

    func appLeft(_ app: AppID) {
        self.remoteSticky[app] = nil
        guard self.remoteApps.remove(app) != nil, let connection = self.connection, self.natsConnected else { return }
        var msg: OpaquePointer?
        guard self.library.api.natsMsg_Create(&msg, self.fleet.requests, nil, nil, 0) == NATS_OK, let msg else { return }
        defer { self.library.api.natsMsg_Destroy(msg) }
        _ = self.library.api.natsMsgHeader_Set(msg, FleetPublisher.appHeader, "\(self.holder)/\(app)")
        _ = self.library.api.natsMsgHeader_Set(msg, FleetPublisher.eventHeader, FleetPublisher.appLeft)
        _ = self.library.api.natsConnection_PublishMsg(connection, msg)
    }

    func sticky(_ holder: AppID, _ text: String, key: String) -> SendOutcome {
        let outcome = self.send(OutboundMessage(.text(text)), app: holder, header: (FleetPublisher.stickyHeader, key))
        if case .rejected = outcome { return outcome }
        self.remoteSticky[holder, default: []].insert(key)
        return outcome
    }

    func unstick(_ holder: AppID, key: String) -> SendOutcome? {
        guard self.remoteSticky[holder]?.remove(key) != nil else { return nil }
        return self.send(OutboundMessage(kind: .text, data: ByteBuffer()), app: holder, header: (FleetPublisher.unstickHeader, key))
    }

    /// This follower's app named `name` (`holder/app`), nil for another follower's.
    func app(named name: String) -> AppID? {
        guard let slash = name.lastIndex(of: "/"), name[..<slash] == self.holder[...] else { return nil }
        return AppID(name[name.index(after: slash)...])
    }
}
