import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// The thread-safe face of an `UpstreamLink`: every call hops to the link's event loop.
package struct UpstreamLinkHandle: Sendable {
    package let eventLoop: any EventLoop
    let link: NIOLoopBound<UpstreamLink>
    /// A pool's connections, the first being `link` (nil: `link` alone).
    let pool: NIOLoopBound<UpstreamPool>?

    init(link: NIOLoopBound<UpstreamLink>, pool: NIOLoopBound<UpstreamPool>? = nil, eventLoop: any EventLoop) {
        self.link = link
        self.pool = pool
        self.eventLoop = eventLoop
    }

    /// Creates a link on `eventLoop` whose events go to `onEvent` (tests and benchmarks; the
    /// daemon builds a `Bridge`). It starts `idle`; call `connect()`.
    package static func make(
        configuration: Configuration,
        networkAvailable: Bool,
        environment: [String: String],
        eventLoop: any EventLoop,
        logger: Logger,
        onEvent: @escaping @Sendable (UpstreamEvent) -> Void
    ) -> EventLoopFuture<UpstreamLinkHandle> {
        eventLoop.submit {
            let link = UpstreamLink(
                configuration: configuration,
                networkAvailable: networkAvailable,
                eventLoop: eventLoop,
                logger: logger,
                connectors: ConnectorFactory(environment: environment),
                events: ClosureEventSink(onEvent)
            )
            return UpstreamLinkHandle(link: NIOLoopBound(link, eventLoop: eventLoop), eventLoop: eventLoop)
        }
    }

    /// Runs `body` on every connection (a pool's, or the one).
    private func run(_ body: @escaping @Sendable (UpstreamLink) -> Void) {
        let (link, pool) = (self.link, self.pool)
        self.eventLoop.execute {
            for each in pool?.value.allLinks ?? [link.value] { body(each) }
        }
    }

    package func connect() { self.run { $0.connect() } }
    package func reconnect() { self.run { $0.reconnect() } }
    package func close(code: UInt16 = 1000, reason: String = "") { self.run { $0.close(code: code, reason: reason) } }
    package func networkChanged(available: Bool) { self.run { $0.networkChanged(available: available) } }
    package func checkLiveness(why: String) { self.run { $0.checkLiveness(why: why) } }
    package func update(configuration: Configuration) { self.run { $0.update(configuration: configuration) } }

    /// Sends a message if the link is open; the future says whether it went out.
    package func send(_ message: OutboundMessage) -> EventLoopFuture<Bool> {
        let link = self.link
        return self.eventLoop.submit { link.value.sendNow(message) }
    }

    /// The link's part of `status` (tests).
    package func status() -> EventLoopFuture<StatusReport> {
        let link = self.link
        return self.eventLoop.submit { link.value.status }
    }

    /// Closes with 1001 and completes once the link is stopped.
    package func shutdown() -> EventLoopFuture<Void> {
        let (link, pool, eventLoop) = (self.link, self.pool, self.eventLoop)
        return self.eventLoop.flatSubmit {
            EventLoopFuture.andAllComplete((pool?.value.allLinks ?? [link.value]).map { $0.shutdown() }, on: eventLoop)
        }
    }
}
