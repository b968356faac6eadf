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

    /// Why an attempt failed, in words an operator can act on: every text is here.
    enum Failure: Error, CustomStringConvertible {
        /// TCP to the server (or the proxy, `via`) failed.
        case cannotConnect(host: String, port: Int, via: String, cause: String)
        /// The channel's handlers could not be added.
        case pipelineSetup(cause: String)
        /// The TLS context could not be made from the settings.
        case tlsSetup(cause: String)
        /// A `tls.*_file` that cannot be used.
        case tlsFile(setting: String, path: String, TLSFileProblem)
        /// The server chose a subprotocol the link did not offer, or none of those it did.
        case subprotocolNotOffered(chosen: String, offered: [String])
        case noSubprotocolChosen(offered: [String])
        /// The server's `Sec-WebSocket-Extensions` answer.
        case extensions(DeflateParameters.NegotiationError)
        /// A 101 in another HTTP version than 1.1.
        case upgradeNotHTTP11(major: Int, minor: Int)
        /// The upgrade was answered without 101 (`status`: " (HTTP 403 Forbidden)", or empty).
        case upgradeRefused(status: String)
        /// The handshake failed on the way (TLS, a reset, a timeout), worded by `describeHandshake`.
        case handshake(String)
        /// An HTTP proxy's 407, with or without credentials in the proxy URL.
        case proxyAuthentication(via: String, hadCredentials: Bool)
        case proxyConnect(via: String, cause: String)
        case proxyPipeline(cause: String)
        case proxyClosed
        /// A SOCKS5 proxy's failure, in its own words or the channel's.
        case socks(SOCKS5Problem)
        case socksFailed(via: String, cause: String)

        enum TLSFileProblem: Sendable {
            /// errno's text, lowercased.
            case unreadable(String)
            /// `what`: what it must hold.
            case noCertificate(what: String)
            case unparsable(what: String, cause: String)
        }

        var description: String {
            switch self {
            case .cannotConnect(let host, let port, let via, let cause): "cannot connect to \(host):\(port)\(via): \(cause)"
            case .pipelineSetup(let cause): "pipeline setup failed: \(cause)"
            case .tlsSetup(let cause): "TLS setup failed: \(cause). Check tls.ca_file, tls.cert_file and tls.key_file"
            case .tlsFile(let setting, let path, .unreadable(let reason)): "\(setting) \(path): \(reason)"
            case .tlsFile(let setting, let path, .noCertificate(let what)): "\(setting) \(path): no certificate in it; it must hold \(what)"
            case .tlsFile(let setting, let path, .unparsable(let what, let cause)): "\(setting) \(path): cannot read \(what) from it (\(cause))"
            case .subprotocolNotOffered(let chosen, let offered):
                "server chose subprotocol '\(chosen)', which was not offered (upstream.subprotocols = \(offered))"
            case .noSubprotocolChosen(let offered): "server accepted none of the offered subprotocols \(offered)"
            case .extensions(let error): "\(error)"
            case .upgradeNotHTTP11(let major, let minor):
                "server answered the upgrade with HTTP/\(major).\(minor) 101, not HTTP/1.1 101: upstream.url must name a WebSocket server (RFC 6455)"
            case .upgradeRefused(let status): "server refused the WebSocket upgrade\(status): check upstream.url's path and the credentials"
            case .handshake(let text): text
            case .proxyAuthentication(let via, let hadCredentials):
                "the proxy \(via) answered HTTP 407 Proxy Authentication Required: "
                    + (hadCredentials
                        ? "it refused the user name and password in the proxy URL"
                        : "it wants credentials: give them in the proxy URL, http://USER:PASSWORD@HOST:PORT (percent-encode special characters)")
            case .proxyConnect(let via, let cause): "HTTP CONNECT through proxy \(via) failed: \(cause)"
            case .proxyPipeline(let cause): "proxy pipeline error: \(cause)"
            case .proxyClosed: "proxy closed the connection"
            case .socks(let problem): "\(problem)"
            case .socksFailed(let via, let cause): "SOCKS5 proxy \(via) failed: \(cause)"
            }
        }
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
                            handshake.fail(Failure.pipelineSetup(cause: "\(error)"))
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
            let failure = Failure.cannotConnect(host: target.0, port: target.1, via: via, cause: Self.describe(error))
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
