import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import WSBridgeCore

/// The optional HTTP endpoint (`[metrics] listen`): `GET /metrics` answers the Prometheus text
/// format, rendered on the daemon's loop from the same registry as the `metrics` op. Anything
/// else gets a short plain-text answer saying what is served.
///
/// Bounds: `metrics.max_connections` connections at once (one more is closed at once); a
/// connection idle for 30 s is closed; request heads are bounded by NIO's HTTP parser (80 KiB),
/// and a request with a body is answered 405 and closed without reading the body.
enum MetricsServer {
    static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    static func start(
        _ settings: Configuration.Metrics,
        address: Configuration.HostPort,
        eventLoop: any EventLoop,
        plane: NIOLoopBound<LocalPlane>,
        logger: Logger
    ) async throws -> any Channel {
        // Every connection is on `eventLoop` (the bootstrap's only loop): the count is bound to it.
        let connections = NIOLoopBoundBox.makeBoxSendingValue(0, eventLoop: eventLoop)
        let limit = settings.maxConnections
        let channel = try await ServerBootstrap(group: eventLoop)
            .serverChannelOption(.backlog, value: 64)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    guard connections.value < limit else {
                        channel.close(promise: nil)
                        return
                    }
                    connections.value += 1
                    channel.closeFuture.assumeIsolated().whenComplete { _ in connections.value -= 1 }
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(IdleStateHandler(allTimeout: .seconds(30)))
                    try channel.pipeline.syncOperations.addHandler(MetricsHTTPHandler(render: { plane.value.metricsText() }))
                }
            }
            .bind(host: address.host, port: address.port).get()
        let bound = channel.localAddress?.port.map { Configuration.HostPort(host: address.host, port: $0).description } ?? address.description
        logger.notice("serving metrics on http://\(bound)/metrics", metadata: ["metrics.listen": "\(bound)"])
        try await eventLoop.submit { plane.value.servingMetrics(at: "http://\(bound)/metrics") }.get()
        return channel
    }
}

/// One HTTP connection: `GET`/`HEAD /metrics` (any query string), else 404 or 405.
final class MetricsHTTPHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let render: () -> [UInt8]
    private var head: HTTPRequestHead?
    private var refused = false

    init(render: @escaping () -> [UInt8]) {
        self.render = render
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch Self.unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            if head.method != .GET && head.method != .HEAD {
                // Answer now, without reading a body the client may be sending.
                self.refused = true
                self.respond(
                    context, head, status: .methodNotAllowed, body: "wsbridged serves GET /metrics only\n", extra: [("Allow", "GET, HEAD")], close: true)
            }
        case .body:
            break
        case .end:
            guard let head = self.head, !self.refused else { return }
            self.head = nil
            let path = head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? head.uri
            if path == "/metrics" {
                let body = self.render()
                self.respond(context, head, status: .ok, body: body, extra: [], close: !head.isKeepAlive)
            } else {
                self.respond(
                    context, head, status: .notFound, body: "not found: wsbridged serves its metrics at /metrics\n", extra: [], close: !head.isKeepAlive)
            }
        }
    }

    private func respond(
        _ context: ChannelHandlerContext, _ request: HTTPRequestHead, status: HTTPResponseStatus, body: String, extra: [(String, String)], close: Bool
    ) {
        self.respond(context, request, status: status, body: Array(body.utf8), extra: extra, close: close)
    }

    private func respond(
        _ context: ChannelHandlerContext, _ request: HTTPRequestHead, status: HTTPResponseStatus, body: [UInt8], extra: [(String, String)], close: Bool
    ) {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: status == .ok ? MetricsServer.contentType : "text/plain; charset=utf-8")
        headers.add(name: "Content-Length", value: "\(body.count)")
        for (name, value) in extra { headers.add(name: name, value: value) }
        if close { headers.add(name: "Connection", value: "close") }
        context.write(Self.wrapOutboundOut(.head(HTTPResponseHead(version: request.version, status: status, headers: headers))), promise: nil)
        if request.method != .HEAD {
            context.write(Self.wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil)
        }
        let done = context.writeAndFlush(Self.wrapOutboundOut(.end(nil)))
        if close {
            done.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }
}

@available(*, unavailable)
extension MetricsHTTPHandler: Sendable {}
