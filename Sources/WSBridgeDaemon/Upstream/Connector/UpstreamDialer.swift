import NIOCore
import WSBridgeCore

/// How the link opens a connection, in two steps: `prepare` (off the loop: the token, the TLS
/// context) and the prepared connection's `connect`. The daemon's is `ConnectorFactory`, whose
/// `UpstreamConnector` dials TCP, the proxy, TLS and the upgrade; a test's dials an
/// `EmbeddedChannel`, so the link's driver is tested on an `EmbeddedEventLoop` without a server.
protocol UpstreamDialer: Sendable {
    func prepare(configuration: Configuration, on eventLoop: any EventLoop) -> EventLoopFuture<any PreparedConnection>
}

/// One connection, ready to dial.
protocol PreparedConnection: Sendable {
    /// The token read for this connection, for `${token}` in the opening messages; never kept.
    var token: String? { get }
    /// Dials: the channel once there is one, and the upgrade's outcome.
    func connect(
        on eventLoop: any EventLoop,
        makeFrameHandler: @escaping @Sendable (any Channel, PerMessageDeflate?) throws -> UpstreamFrameHandler
    ) -> (channel: EventLoopFuture<any Channel>, handshake: EventLoopFuture<UpstreamConnector.Handshake>)
}

extension UpstreamConnector: PreparedConnection {}

extension ConnectorFactory: UpstreamDialer {
    func prepare(configuration: Configuration, on eventLoop: any EventLoop) -> EventLoopFuture<any PreparedConnection> {
        self.connector(configuration: configuration, on: eventLoop).map { $0 }
    }
}
