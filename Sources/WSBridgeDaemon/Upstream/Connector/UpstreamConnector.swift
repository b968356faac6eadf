import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOExtras
import NIOHTTP1
import NIOPosix
import NIOSOCKS
import NIOSSL
import NIOWebSocket
import WSBridgeCore
import WSBridgeProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Opens one upstream WebSocket connection: TCP (optionally through an HTTP CONNECT or SOCKS5
/// proxy), TLS, and the HTTP/1.1 upgrade, then hands the channel's frames to a handler.
///
/// Stateless: the link driver calls `connect` once per attempt, so certificates, keys and the
/// token are re-read at every connect (rotation works without a restart).
struct UpstreamConnector: Sendable {
    var upstream: Configuration.Upstream
    var tls: Configuration.TLS
    var proxy: ProxyURL?
    var token: String?

    /// The result of a successful handshake.
    struct Handshake: Sendable {
        var channel: any Channel
        var subprotocol: String?
        var deflate: DeflateParameters?
    }

    /// Why an attempt failed, in words an operator can act on.
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// The proxy to use for `url`: the configured one, else the environment's (if allowed).
    static func proxy(for configuration: Configuration, environment: [String: String]) -> ProxyURL? {
        if let proxy = configuration.proxy.url { return proxy }
        guard configuration.proxy.useEnvironment else { return nil }
        return ProxyURL.fromEnvironment(environment, for: configuration.upstream.url)
    }

    /// Starts an attempt. `channel` completes once TCP is connected (so the driver can abort it);
    /// `handshake` once the upgrade succeeded.
    func connect(
        on eventLoop: any EventLoop,
        makeFrameHandler: @escaping @Sendable (any Channel, DeflateParameters?) throws -> UpstreamFrameHandler
    ) -> (channel: EventLoopFuture<any Channel>, handshake: EventLoopFuture<Handshake>) {
        let handshake = eventLoop.makePromise(of: Handshake.self)
        let sslContext: NIOSSLContext?
        do {
            sslContext = try self.makeSSLContext()
        } catch {
            let failure = Failure(description: "TLS setup failed: \(error). Check tls.ca_file, tls.cert_file and tls.key_file")
            handshake.fail(failure)
            return (eventLoop.makeFailedFuture(failure), handshake.futureResult)
        }
        let url = self.upstream.url
        let proxy = self.proxy
        let connector = self
        let bootstrap = ClientBootstrap(group: eventLoop)
            .connectTimeout(TimeAmount.nanoseconds(self.upstream.connectTimeout.nanoseconds))
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let afterTunnel: @Sendable (any Channel) -> Void = { channel in
                        do {
                            try connector.addWebSocketHandlers(
                                to: channel,
                                sslContext: sslContext,
                                handshake: handshake,
                                makeFrameHandler: makeFrameHandler
                            )
                        } catch {
                            handshake.fail(Failure(description: "pipeline setup failed: \(error)"))
                        }
                    }
                    switch proxy?.kind {
                    case .none:
                        afterTunnel(channel)
                    case .httpConnect:
                        try connector.addHTTPConnect(to: channel, handshake: handshake, then: afterTunnel)
                    case .socks5:
                        try connector.addSOCKS(to: channel, handshake: handshake, then: afterTunnel)
                    }
                }
            }
        let target = proxy.map { ($0.host, $0.port) } ?? (url.host, url.port)
        let channel = bootstrap.connect(host: target.0, port: target.1).flatMapErrorThrowing { error in
            let via = proxy.map { " (proxy \($0))" } ?? ""
            let failure = Failure(description: "cannot connect to \(target.0):\(target.1)\(via): \(Self.describe(error))")
            handshake.fail(failure)
            throw failure
        }
        return (channel, handshake.futureResult)
    }

    static func describe(_ error: any Error) -> String {
        switch error {
        case let e as IOError:
            return String(cString: strerror(e.errnoCode)).lowercased()
        case let e as NIOConnectionError:
            if let first = e.connectionErrors.first { return Self.describe(first.error) }
            if e.dnsAAAAError != nil || e.dnsAError != nil { return "name resolution failed for \(e.host)" }
            return "\(e)"
        case is ChannelError:
            if case ChannelError.connectTimeout(let t) = error { return "TCP connect timed out after \(t)" }
            return "\(error)"
        default:
            return "\(error)"
        }
    }

    func makeSSLContext() throws -> NIOSSLContext? {
        guard self.upstream.url.isTLS else { return nil }
        var config = TLSConfiguration.makeClientConfiguration()
        config.minimumTLSVersion = .tlsv12
        if let ca = self.tls.caFile {
            config.additionalTrustRoots = [.file(ca)]
        }
        if let cert = self.tls.certFile, let key = self.tls.keyFile {
            config.certificateChain = try NIOSSLCertificate.fromPEMFile(cert).map { .certificate($0) }
            config.privateKey = .privateKey(try NIOSSLPrivateKey(file: key, format: .pem))
        }
        if self.tls.insecure {
            config.certificateVerification = .none
        }
        return try NIOSSLContext(configuration: config)
    }

    /// The SNI / verification name: `tls.server_name`, else the URL's host unless it is an IP literal.
    var serverHostname: String? {
        if let name = self.tls.serverName { return name }
        let host = self.upstream.url.host
        if host.contains(":") || host.split(separator: ".").allSatisfy({ UInt8($0) != nil }) { return nil }
        return host
    }

    private func addHTTPConnect(
        to channel: any Channel,
        handshake: EventLoopPromise<Handshake>,
        then next: @escaping @Sendable (any Channel) -> Void
    ) throws {
        let tunnel = channel.eventLoop.makePromise(of: Void.self)
        let encoder = HTTPRequestEncoder()
        let decoder = ByteToMessageHandler(HTTPResponseDecoder(leftOverBytesStrategy: .forwardBytes))
        let connect = NIOHTTP1ProxyConnectHandler(
            targetHost: self.upstream.url.host,
            targetPort: self.upstream.url.port,
            headers: HTTPHeaders(),
            deadline: .now() + .nanoseconds(self.upstream.connectTimeout.nanoseconds),
            promise: tunnel
        )
        let sync = channel.pipeline.syncOperations
        try sync.addHandler(encoder, name: "wsb.proxy.encoder")
        try sync.addHandler(decoder, name: "wsb.proxy.decoder")
        try sync.addHandler(connect)
        let proxy = self.proxy
        tunnel.futureResult.whenComplete { result in
            switch result {
            case .failure(let error):
                handshake.fail(Failure(description: "HTTP CONNECT through proxy \(proxy.map(\.description) ?? "") failed: \(error)"))
                channel.close(promise: nil)
            case .success:
                channel.pipeline.removeHandler(name: "wsb.proxy.encoder").flatMap {
                    channel.pipeline.removeHandler(name: "wsb.proxy.decoder")
                }.whenComplete { removed in
                    switch removed {
                    case .success: next(channel)
                    case .failure(let error): handshake.fail(Failure(description: "proxy pipeline error: \(error)"))
                    }
                }
            }
        }
    }

    private func addSOCKS(
        to channel: any Channel,
        handshake: EventLoopPromise<Handshake>,
        then next: @escaping @Sendable (any Channel) -> Void
    ) throws {
        let established = channel.eventLoop.makePromise(of: Void.self)
        let socks = SOCKSClientHandler(targetAddress: .domain(self.upstream.url.host, port: self.upstream.url.port))
        let waiter = SOCKSEstablishedHandler(promise: established)
        try channel.pipeline.syncOperations.addHandler(socks)
        try channel.pipeline.syncOperations.addHandler(waiter, name: "wsb.socks.waiter")
        let proxy = self.proxy
        established.futureResult.whenComplete { result in
            switch result {
            case .failure(let error):
                handshake.fail(Failure(description: "SOCKS5 proxy \(proxy.map(\.description) ?? "") failed: \(error)"))
                channel.close(promise: nil)
            case .success:
                channel.pipeline.removeHandler(name: "wsb.socks.waiter").whenComplete { _ in next(channel) }
            }
        }
    }

    private func addWebSocketHandlers(
        to channel: any Channel,
        sslContext: NIOSSLContext?,
        handshake: EventLoopPromise<Handshake>,
        makeFrameHandler: @escaping @Sendable (any Channel, DeflateParameters?) throws -> UpstreamFrameHandler
    ) throws {
        let sync = channel.pipeline.syncOperations
        if let sslContext {
            try sync.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: self.serverHostname))
        }
        let url = self.upstream.url
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: url.hostHeader)
        headers.add(name: "User-Agent", value: "wsbridged/\(WSBridgeVersion.current)")
        for header in self.upstream.headers {
            headers.add(name: header.name, value: header.value)
        }
        if let token = self.token {
            headers.replaceOrAdd(name: "Authorization", value: "Bearer \(token)")
        }
        let offerDeflate = self.upstream.compression
        if offerDeflate {
            headers.add(name: "Sec-WebSocket-Extensions", value: DeflateParameters.offer)
        }
        if !self.upstream.subprotocols.isEmpty {
            headers.add(name: "Sec-WebSocket-Protocol", value: self.upstream.subprotocols.joined(separator: ", "))
        }
        let offered = self.upstream.subprotocols
        let maxMessageSize = self.upstream.maxMessageSize
        let upgrader = NIOTypedWebSocketClientUpgrader<Handshake?>(
            maxFrameSize: maxMessageSize,
            enableAutomaticErrorHandling: true,
            upgradePipelineHandler: { channel, response in
                channel.eventLoop.makeCompletedFuture {
                    let chosen = response.headers.first(name: "Sec-WebSocket-Protocol")
                    if let chosen, !offered.contains(chosen) {
                        throw Failure(description: "server chose subprotocol '\(chosen)', which was not offered (upstream.subprotocols = \(offered))")
                    }
                    if offered.count > 0 && chosen == nil {
                        throw Failure(description: "server accepted none of the offered subprotocols \(offered)")
                    }
                    let extensions = response.headers[canonicalForm: "Sec-WebSocket-Extensions"].joined(separator: ", ")
                    let deflate: DeflateParameters?
                    do {
                        deflate = try DeflateParameters.negotiate(response: extensions, offered: offerDeflate)
                    } catch {
                        throw Failure(description: "\(error)")
                    }
                    // The status recorder only matters for a refused upgrade; it must not see frames.
                    channel.pipeline.syncOperations.removeHandler(name: "wsb.status", promise: nil)
                    try channel.pipeline.syncOperations.addHandler(makeFrameHandler(channel, deflate))
                    // UTF-8 checked as bytes arrive, in front of NIO's whole-frame decoder.
                    let decoder = try channel.pipeline.syncOperations.handler(type: ByteToMessageHandler<WebSocketFrameDecoder>.self)
                    try channel.pipeline.syncOperations.addHandler(TextStreamValidator(), position: .before(decoder))
                    // Reported once the upgrade has finished (HTTP handlers gone): only then may frames be written.
                    return Handshake(channel: channel, subprotocol: chosen, deflate: deflate)
                }
            }
        )
        let request = HTTPRequestHead(version: .http1_1, method: .GET, uri: url.path, headers: headers)
        var configuration = NIOUpgradableHTTPClientPipelineConfiguration(
            upgradeConfiguration: .init(
                upgradeRequestHead: request,
                upgraders: [upgrader],
                notUpgradingCompletionHandler: { channel in
                    channel.eventLoop.makeCompletedFuture { nil }
                }
            )
        )
        configuration.leftOverBytesStrategy = .forwardBytes
        let upgraded = try sync.configureUpgradableHTTPClientPipeline(configuration: configuration)
        let status = ResponseStatusRecorder()
        try sync.addHandler(status, name: "wsb.status")
        upgraded.whenComplete { result in
            switch result {
            case .success(let upgraded?):
                handshake.succeed(upgraded)
            case .success(nil):
                // Let the recorder see the response head (forwarded after the upgrade handler is removed).
                channel.eventLoop.execute {
                    let code = status.status.map { " (HTTP \($0.code) \($0.reasonPhrase))" } ?? ""
                    handshake.fail(Failure(description: "server refused the WebSocket upgrade\(code): check upstream.url's path and the credentials"))
                    channel.close(promise: nil)
                }
            case .failure(let error):
                handshake.fail(error as? Failure ?? Failure(description: "WebSocket handshake failed: \(error)"))
                channel.close(promise: nil)
            }
        }
    }
}

/// Remembers the status of a refused upgrade's response, for the error message.
final class ResponseStatusRecorder: ChannelInboundHandler, RemovableChannelHandler, Sendable {
    typealias InboundIn = HTTPClientResponsePart

    private let box = NIOLockedValueBox<HTTPResponseStatus?>(nil)

    var status: HTTPResponseStatus? { self.box.withLockedValue { $0 } }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(let head) = Self.unwrapInboundIn(data) {
            self.box.withLockedValue { $0 = head.status }
        }
    }
}

/// Completes a promise when the SOCKS handshake is done (or fails).
final class SOCKSEstablishedHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    private let promise: EventLoopPromise<Void>
    private var done = false

    init(promise: EventLoopPromise<Void>) {
        self.promise = promise
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is SOCKSProxyEstablishedEvent, !self.done {
            self.done = true
            self.promise.succeed(())
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if !self.done {
            self.done = true
            self.promise.fail(error)
        }
        context.fireErrorCaught(error)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !self.done {
            self.done = true
            self.promise.fail(UpstreamConnector.Failure(description: "proxy closed the connection"))
        }
        context.fireChannelInactive()
    }
}

@available(*, unavailable)
extension SOCKSEstablishedHandler: Sendable {}
