import CNATS
import DequeModule
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import WSBridgeCore
import WSBridgeProtocol

/// The publisher's NATS connection (FleetPublisher.swift): made in the background, the stream
/// looked up once it is up (and again every second until it exists), what was in flight
/// published again after each reconnect.
extension FleetPublisher {
    /// Connects (in the background; the NATS client keeps trying), on a thread of the pool: its
    /// calls block.
    func start(name: String) {
        let bound = NIOLoopBound(self, eventLoop: self.eventLoop)
        let loop = self.eventLoop
        let answers = self.answers
        let handlers = NATSHandlers(
            library: self.library,
            connectionChanged: { connected, closed in loop.execute { bound.value.connectionChanged(connected: connected, closed: closed) } },
            acknowledged: { seq, error in
                // One hop for however many answers came meanwhile.
                let schedule = answers.withLockedValue { box in
                    box.answers.append((seq, error))
                    defer { box.scheduled = true }
                    return !box.scheduled
                }
                if schedule { loop.execute { bound.value.takeAnswers() } }
            })
        self.handlers = handlers
        let library = self.library
        let fleet = self.fleet
        let maxPending = Int64(fleet.maxInFlight * 2)
        let requests = NATSMessages { message in
            let owned = UnsafeSendable(message)
            loop.execute { bound.value.request(owned) }
        }
        self.requests = requests
        let opened = NIOThreadPool.singleton.runIfActive(eventLoop: self.eventLoop) { () throws -> (NATSConnected, UnsafeSendable<OpaquePointer?>) in
            let connected = try library.connect(fleet, name: name, handlers: handlers, maxPending: maxPending)
            // Registered now, sent to the server whenever the connection is up.
            var subscription: OpaquePointer?
            let status = library.api.natsConnection_Subscribe(&subscription, connected.connection, fleet.requests, NATSMessages.callback, requests.closure)
            if status != NATS_OK { throw FleetError("subscribing to fleet.requests (\(fleet.requests)): \(library.text(status))") }
            return (connected, UnsafeSendable(subscription))
        }
        opened.assumeIsolated().whenComplete { result in
            switch result {
            case .success(let (connected, subscription)):
                self.connection = connected.connection
                self.jetStream = connected.jetStream
                self.requestsSubscription = subscription.value
                // Up now, or came up (its callback on the loop) before this was here.
                if connected.now || self.cameUp { self.connectionChanged(connected: true, closed: false) }
            case .failure(let error):
                self.state = .closed
                self.lastError = "\(error)"
                self.logger.error("fleet: \(error)")
            }
        }
    }

    private func connectionChanged(connected: Bool, closed: Bool) {
        guard self.state != .closed else { return }
        if closed {
            self.state = .closed
            return
        }
        self.cameUp = connected
        guard connected else {
            self.state = .disconnected
            self.logger.warning("fleet: NATS disconnected; \(self.waiting.count + self.inFlight.count) message(s) wait for it")
            return
        }
        self.checkStream()
    }

    /// Whether the stream is there (the operator makes it, docs/fleet.md): publishing starts
    /// once it is, and is tried again every second until then.
    private func checkStream() {
        guard let jetStream = self.jetStream else { return }
        let library = self.library
        let stream = self.fleet.stream
        let handle = UnsafeSendable(jetStream)
        NIOThreadPool.singleton.runIfActive(eventLoop: self.eventLoop) { () -> String? in
            var info: UnsafeMutablePointer<jsStreamInfo>?
            var code = jsErrCode(rawValue: 0)
            let status = library.api.js_GetStreamInfo(&info, handle.value, stream, nil, &code)
            if let info { library.api.jsStreamInfo_Destroy(info) }
            return status == NATS_OK ? nil : "the stream \(stream): \(library.text(status)) (JetStream error \(code.rawValue))"
        }.assumeIsolated().whenComplete { result in
            guard self.state != .closed else { return }
            let problem: String? =
                switch result {
                case .success(let problem): problem
                case .failure(let error): "\(error)"
                }
            if let problem {
                self.state = .connecting
                if self.lastError != problem { self.logger.error("fleet: \(problem); make it (docs/fleet.md): publishing waits for it") }
                self.lastError = problem
                self.retryLater(.seconds(1)) { self.checkStream() }
                return
            }
            self.state = .connected
            self.lastError = nil
            if let connection = self.connection { self.lease?.start(connection: connection) }
            self.logger.notice("fleet: publishing into the JetStream stream \(self.fleet.stream), subject \(self.fleet.subject)")
            // What was in flight keeps its handing: each has one answer from the client (stored,
            // refused, or timed out after ack_timeout; a refused or timed-out one waits again in
            // its place). Handing it again now would let the first handing's late answer be
            // taken for the second's. Once the flight has landed, the stream's last message is
            // read before anything more goes.
            self.resyncing = true
            self.resyncWhenLanded()
            self.pump()
        }
    }

    func retryLater(_ delay: TimeAmount, _ body: @escaping () -> Void) {
        self.retry?.cancel()
        self.retry = self.eventLoop.assumeIsolated().scheduleTask(in: delay) { body() }
    }
}
