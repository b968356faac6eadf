import CNATS
import Foundation
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// A follower's apps' sends go to the bridge as NATS requests on `fleet.requests` (docs/fleet.md):
/// one inbox, a subject per send, the bridge's answer (its outcome) the app's reply.
extension FleetFollower {
    func send(_ message: OutboundMessage) -> SendOutcome {
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
        guard !entries.isEmpty || self.stickyShared else { return }
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
