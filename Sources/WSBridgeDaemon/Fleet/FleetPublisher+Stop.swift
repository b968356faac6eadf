import CNATS
import Logging
import NIOCore
import NIOPosix
import WSBridgeCore

extension FleetPublisher {
    /// Closes the connection (the daemon stops), once JetStream acknowledged what was numbered
    /// (while NATS is there), or after `fleet.ack_timeout`: what is left then is not published.
    /// A leader releases its lease in between: a standby's takeover comes after its last message.
    func stop() -> EventLoopFuture<Void> {
        guard self.state == .connected, !self.waiting.isEmpty || !self.inFlight.isEmpty || self.spill != nil else { return self.releaseAndClose() }
        let drained = self.eventLoop.makePromise(of: Void.self)
        self.drained = drained
        // Its own timer: the retries' may be replaced meanwhile.
        self.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(self.fleet.ackTimeout.nanoseconds)) {
            guard self.drained?.futureResult === drained.futureResult else { return }
            self.drained = nil
            self.logger.warning("fleet: stopping with \(self.waiting.count + self.inFlight.count) message(s) not acknowledged by JetStream")
            drained.succeed()
        }
        return drained.futureResult.assumeIsolated().flatMap { self.releaseAndClose() }.nonisolated()
    }

    private func releaseAndClose() -> EventLoopFuture<Void> {
        guard let lease = self.lease else { return self.close() }
        return lease.stop().assumeIsolated().flatMap { self.close() }.nonisolated()
    }

    private func close() -> EventLoopFuture<Void> {
        self.state = .closed
        self.retry?.cancel()
        self.remoteApps.stop()
        guard let connection = self.connection else { return self.eventLoop.makeSucceededVoidFuture() }
        let jetStream = self.jetStream
        self.connection = nil
        self.jetStream = nil
        let library = self.library
        let handles = UnsafeSendable((connection, jetStream))
        let handlers = self.handlers
        let requests = UnsafeSendable((self.requests, self.requestsSubscription))
        self.requestsSubscription = nil
        return NIOThreadPool.singleton.runIfActive(eventLoop: self.eventLoop) {
            let (connection, jetStream) = handles.value
            library.close(connection, jetStream: jetStream)
            if let subscription = requests.value.1 { library.api.natsSubscription_Destroy(subscription) }
            withExtendedLifetime((handlers, requests.value.0)) {}
        }
    }
}
