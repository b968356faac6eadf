import ExtrasBase64
import NIOCore
import NIOExtras
import NIOHTTP1
import NIOSOCKS
import WSBridgeCore

/// The tunnel through an HTTP CONNECT or SOCKS5 proxy, before TLS and the upgrade.
extension UpstreamConnector {
    func addHTTPConnect(
        to channel: any Channel,
        handshake: EventLoopPromise<Handshake>,
        then next: @escaping @Sendable (any Channel) -> Void
    ) throws {
        let tunnel = channel.eventLoop.makePromise(of: Void.self)
        let encoder = HTTPRequestEncoder()
        let decoder = ByteToMessageHandler(HTTPResponseDecoder(leftOverBytesStrategy: .forwardBytes))
        var headers = HTTPHeaders()
        if let user = self.proxy?.username {
            // RFC 7617 Basic, as curl and browsers send it for http://user:password@proxy.
            let credentials = Array("\(user):\(self.proxy?.password ?? "")".utf8)
            headers.add(name: "Proxy-Authorization", value: "Basic \(Base64.encodeToString(bytes: credentials))")
        }
        // An IPv6 literal is bracketed in CONNECT's authority (RFC 9110 §9.3.6, RFC 3986).
        let host = self.upstream.url.host
        let connect = NIOHTTP1ProxyConnectHandler(
            targetHost: host.contains(":") ? "[\(host)]" : host,
            targetPort: self.upstream.url.port,
            headers: headers,
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
                let via = proxy.map(\.description) ?? ""
                if "\(error)".contains("Proxy Authentication Required") {
                    handshake.fail(Failure.proxyAuthentication(via: via, hadCredentials: proxy?.username != nil))
                } else {
                    handshake.fail(Failure.proxyConnect(via: via, cause: "\(error)"))
                }
                channel.close(promise: nil)
            case .success:
                channel.pipeline.removeHandler(name: "wsb.proxy.encoder").flatMap {
                    channel.pipeline.removeHandler(name: "wsb.proxy.decoder")
                }.whenComplete { removed in
                    switch removed {
                    case .success: next(channel)
                    case .failure(let error): handshake.fail(Failure.proxyPipeline(cause: "\(error)"))
                    }
                }
            }
        }
    }

    func addSOCKS(
        to channel: any Channel,
        handshake: EventLoopPromise<Handshake>,
        then next: @escaping @Sendable (any Channel) -> Void
    ) throws {
        let established = channel.eventLoop.makePromise(of: Void.self)
        let proxy = self.proxy
        if let user = proxy?.username {
            // NIOSOCKS offers no authentication: RFC 1929 by our own handler.
            let socks = SOCKS5AuthClientHandler(
                host: self.upstream.url.host, port: self.upstream.url.port, username: user, password: proxy?.password ?? "", promise: established)
            try channel.pipeline.syncOperations.addHandler(socks)
            established.futureResult.whenComplete { result in
                switch result {
                case .failure(let error):
                    handshake.fail(error as? Failure ?? Failure.socksFailed(via: proxy.map(\.description) ?? "", cause: "\(error)"))
                    channel.close(promise: nil)
                case .success:
                    next(channel)
                }
            }
            return
        }
        let socks = SOCKSClientHandler(targetAddress: .domain(self.upstream.url.host, port: self.upstream.url.port))
        let waiter = SOCKSEstablishedHandler(promise: established)
        try channel.pipeline.syncOperations.addHandler(socks)
        try channel.pipeline.syncOperations.addHandler(waiter, name: "wsb.socks.waiter")
        established.futureResult.whenComplete { result in
            switch result {
            case .failure(let error):
                handshake.fail(Failure.socksFailed(via: proxy.map(\.description) ?? "", cause: "\(error)"))
                channel.close(promise: nil)
            case .success:
                channel.pipeline.removeHandler(name: "wsb.socks.waiter").whenComplete { _ in next(channel) }
            }
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
            self.promise.fail(UpstreamConnector.Failure.proxyClosed)
        }
        context.fireChannelInactive()
    }
}

@available(*, unavailable)
extension SOCKSEstablishedHandler: Sendable {}
