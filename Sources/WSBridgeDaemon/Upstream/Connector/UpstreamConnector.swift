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
/// One per attempt, made by `ConnectorFactory` off the event loop: the token was read and the
/// TLS context built (or taken from the cache) before it reaches the loop, so `connect` does no
/// file or trust-store I/O. Proxies: UpstreamConnector+Proxy; the upgrade: +Upgrade.
struct UpstreamConnector: Sendable {
    var upstream: Configuration.Upstream
    var tls: Configuration.TLS
    var proxy: ProxyURL?
    var token: String?
    /// nil for ws://.
    var sslContext: NIOSSLContext?

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
        makeFrameHandler: @escaping @Sendable (any Channel, PerMessageDeflate?) throws -> UpstreamFrameHandler
    ) -> (channel: EventLoopFuture<any Channel>, handshake: EventLoopFuture<Handshake>) {
        let handshake = eventLoop.makePromise(of: Handshake.self)
        let sslContext = self.sslContext
        let url = self.upstream.url
        let proxy = self.proxy
        let connector = self
        let bootstrap = ClientBootstrap(group: eventLoop)
            .connectTimeout(TimeAmount.nanoseconds(self.upstream.connectTimeout.nanoseconds))
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
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

    /// A failed TLS or WebSocket handshake, said as what is wrong and which setting fixes it
    /// (not BoringSSL's error stack).
    /// `name`: the name the certificate is checked against (tls.server_name, else the URL's host).
    static func describeHandshake(_ error: any Error, tls: Bool, name: String = "") -> String {
        switch TLSFailure(error) {
        case .untrusted:
            return
                "the server's certificate is not trusted for \(name) (TLS: CERTIFICATE_VERIFY_FAILED): if a private CA signed it, set tls.ca_file to that CA's certificate (PEM); if it does not name \(name), connect by a name it holds or set tls.server_name; tls.insecure = true skips the check, for tests only"
        case .wrongName:
            return "the server's certificate does not name \(name): use a name it holds in upstream.url, or set tls.server_name to one"
        case .refused(let reason):
            return "the server refused the TLS handshake; if it wants a client certificate, set tls.cert_file and tls.key_file (TLS: \(reason))"
        case .notTLS(let reason):
            return "the server did not answer TLS (TLS: \(reason)): is this a plain port? use ws:// in upstream.url, or check the port"
        case .other(let reason):
            return "TLS handshake failed (\(reason)): check upstream.url's port and the tls settings"
        case nil:
            break
        }
        if !tls, error is HTTPParserError {
            return "the server's answer is not HTTP: if this port speaks TLS, use wss:// in upstream.url"
        }
        if !tls, let e = error as? ChannelError, e == .inappropriateOperationForState || e == .eof {
            return "the server closed the connection without an HTTP answer: if this port speaks TLS, use wss:// in upstream.url"
        }
        return "WebSocket handshake failed: \(error)"
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
}
