import CWSBridgeLinux
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket
import WSBridgeCore

#if canImport(Glibc)
    import Glibc
#endif

/// The WebSocket face's listeners: each connection's peer found, then an HTTP server that takes
/// its upgrade (an app of the plane, `LocalPlane+WebSocket`) or answers why not.
enum WebSocketListener {
    /// Listens where `[local.websocket]` says (its loopback address, its Unix socket, or both);
    /// returns the listening channels.
    /// `tls`: the loopback or network address serves wss:// (the Unix socket stays plain).
    static func listen(
        _ plane: NIOLoopBound<LocalPlane>, configuration: Configuration, tls: NIOSSLContext? = nil, eventLoop: any EventLoop, groups: GroupCache,
        logger: Logger
    ) async throws -> [any Channel] {
        let settings = configuration.local.webSocket
        var bootstrap = ServerBootstrap(group: eventLoop)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelInitializer(LocalServer.pausingAccepts(plane))
            .childChannelOption(.writeBufferWaterMark, value: .init(low: 64 * 1024, high: 256 * 1024))
            .childChannelInitializer { channel in
                if let tls, channel.localAddress?.protocol != .unix {
                    do {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls))
                    } catch {
                        return channel.eventLoop.makeFailedFuture(error)
                    }
                }
                return Self.accepted(channel, plane: plane, settings: settings, groups: groups)
            }
        // As the NDJSON socket's clients: a larger kernel buffer keeps a reader reading while the
        // loop is busy (0: the system's default).
        if configuration.local.sendBufferBytes > 0 {
            bootstrap = bootstrap.childChannelOption(.socketOption(.so_sndbuf), value: SocketOptionValue(configuration.local.sendBufferBytes))
        }
        var channels: [any Channel] = []
        if let address = settings.listen {
            do {
                let channel = try await bootstrap.bind(host: address.host, port: address.port).get()
                channels.append(channel)
                logger.notice("WebSocket face listening on \(tls == nil ? "ws" : "wss")://\(address)/", metadata: ["local.websocket.listen": "\(address)"])
            } catch {
                throw WebSocketFaceError.cannotListen(address: "\(address)", "\(error)")
            }
        }
        if let path = settings.socket {
            channels.append(try await LocalServer.bind(bootstrap, path: path, local: configuration.local, logger: logger))
            logger.notice("WebSocket face listening on ws+unix:\(path)", metadata: ["local.websocket.socket": "\(path)"])
        }
        return channels
    }

    /// A new connection: who it is (the Unix socket's peer credentials, or the owner of a loopback
    /// TCP peer by sock_diag), then an HTTP server that takes its upgrade, or answers why not.
    private static func accepted(
        _ channel: any Channel, plane: NIOLoopBound<LocalPlane>, settings: Configuration.Local.WebSocket, groups: GroupCache
    ) -> EventLoopFuture<Void> {
        let admitted = plane.value.webSocketAdmit()
        channel.closeFuture.assumeIsolated().whenComplete { _ in if admitted { plane.value.webSocketLeft() } }
        let refusal = NIOLoopBoundBox<Refusal?>(admitted ? nil : .full(settings.maxClients), eventLoop: channel.eventLoop)
        // Where the app's frames start (raw: the seq after which it gets every message).
        let start = NIOLoopBoundBox<WebSocketStart?>(nil, eventLoop: channel.eventLoop)
        // A connection that never sends its upgrade request is closed.
        let handshake = channel.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(settings.handshakeTimeout.nanoseconds)) {
            plane.value.logger.info("a WebSocket connection sent no upgrade within local.websocket.handshake_timeout: closed")
            channel.close(promise: nil)
        }
        channel.closeFuture.whenComplete { _ in handshake.cancel() }
        return Self.credentials(of: channel, groups: groups).flatMapThrowing { peer, groups in
            let sync = channel.pipeline.syncOperations
            let upgrader = NIOWebSocketServerUpgrader(
                maxFrameSize: settings.maxFrameSize,
                automaticErrorHandling: false,
                shouldUpgrade: { channel, head in
                    channel.eventLoop.makeCompletedFuture {
                        if refusal.value != nil { return nil }
                        let face = plane.value.webSocket.face
                        if let refused = Self.check(head, settings: settings, face: face, token: plane.value.webSocket.token) {
                            refusal.value = refused
                            return nil
                        }
                        var headers = HTTPHeaders()
                        if let chosen = face?.subprotocol(offered: Self.subprotocols(head)) { headers.add(name: "Sec-WebSocket-Protocol", value: chosen) }
                        switch plane.value.webSocketStart(query: Self.query(head)) {
                        case .failure(let refused):
                            refusal.value = refused
                            return nil
                        case .success(let from):
                            start.value = from
                            if let from {
                                // The stream and the seq its first frame follows: an app that counts
                                // its frames knows what to resume from (docs/websocket.md).
                                headers.add(name: "Wsbridge-Stream", value: from.stream)
                                headers.add(name: "Wsbridge-Seq", value: "\(from.seq)")
                            }
                        }
                        return headers
                    }
                },
                upgradePipelineHandler: { channel, head in
                    channel.eventLoop.makeCompletedFuture {
                        handshake.cancel()
                        let sync = channel.pipeline.syncOperations
                        // What answers a request not upgraded is done: frames come now.
                        sync.removeHandler(name: RefusalHandler.name, promise: nil)
                        // The app writes frames as bytes (each upstream message framed once for all),
                        // past the encoder the upgrade put in.
                        let output = FrameOutput()
                        try sync.addHandler(output, position: .before(try sync.handler(type: WebSocketFrameEncoder.self)))
                        try sync.addHandler(
                            NIOWebSocketFrameAggregator(
                                minNonFinalFragmentSize: 0, maxAccumulatedFrameCount: settings.maxFragments,
                                maxAccumulatedFrameSize: settings.maxMessageSize))
                        let token = plane.value.webSocket.token.map { Self.bearer(head) == $0 } ?? false
                        let app = plane.value.makeWebSocketApp(
                            WebSocketPeer(
                                credentials: peer, groups: groups, address: Self.describe(channel.remoteAddress),
                                userAgent: head.headers.first(name: "User-Agent"),
                                uri: head.uri, hasToken: token),
                            output: output, start: start.value)
                        try sync.addHandler(app)
                    }
                }
            )
            try sync.configureHTTPServerPipeline(withServerUpgrade: (upgraders: [upgrader], completionHandler: { _ in }), withErrorHandling: true)
            try sync.addHandler(RefusalHandler(refusal: refusal), name: RefusalHandler.name)
        }
    }

    /// Why an upgrade request is refused (nil: it is not). `face`: the protocol's, with
    /// `upstream.protocol` (its library's path answered too, its query checked).
    static func check(_ head: HTTPRequestHead, settings: Configuration.Local.WebSocket, face: AppProtocolFace?, token: String?) -> Refusal? {
        let path = String(head.uri.prefix { $0 != "?" })
        let paths = settings.paths + (face?.libraryPaths ?? [])
        guard paths.contains(path) else { return .path(path, paths) }
        if let face, let why = face.refusal(query: Self.query(head)) { return .request(why) }
        if let origin = head.headers.first(name: "Origin"), !settings.allowedOrigins.contains("*"), !settings.allowedOrigins.contains(origin) {
            return .origin(origin)
        }
        if let token, Self.bearer(head) != token { return .token }
        return nil
    }

    /// A request's query (after `?`; empty without one).
    static func query(_ head: HTTPRequestHead) -> String {
        head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).dropFirst().first.map(String.init) ?? ""
    }

    /// The subprotocols the client offers (`Sec-WebSocket-Protocol`, comma-separated, perhaps
    /// in several headers).
    static func subprotocols(_ head: HTTPRequestHead) -> [String] {
        head.headers["Sec-WebSocket-Protocol"].flatMap { $0.split(separator: ",") }.map { $0.trimming { $0 == " " || $0 == "\t" } }
    }

    /// The bearer token a request carries: `Authorization: Bearer TOKEN`, or `access_token=TOKEN`
    /// in its query (a browser's WebSocket cannot set headers).
    static func bearer(_ head: HTTPRequestHead) -> String? {
        if let authorization = head.headers.first(name: "Authorization"), authorization.lowercased().hasPrefix("bearer ") {
            return String(authorization.dropFirst(7).drop { $0 == " " })
        }
        return AppProtocolFace.fields(Self.query(head))["access_token"].map(String.init)
    }

    /// Who is on the other end: SO_PEERCRED on the Unix socket; on loopback TCP the uid that
    /// owns the peer's socket (sock_diag), with its primary group. Their groups are looked up
    /// off the loop. nil: unknown (read-only).
    private static func credentials(of channel: any Channel, groups: GroupCache) -> EventLoopFuture<(PeerCredentials?, Set<UInt32>)> {
        let found: EventLoopFuture<PeerCredentials?>
        if case .unixDomainSocket = channel.localAddress, let provider = channel as? any SocketOptionProvider {
            let raw: EventLoopFuture<cwsb_ucred> = provider.unsafeGetSocketOption(level: .socket, name: NIOBSDSocket.Option(rawValue: cwsb_so_peercred()))
            found = raw.map { PeerCredentials(kernel: $0) }.recover { _ in nil }
        } else if let local = channel.localAddress, let remote = channel.remoteAddress {
            found = NIOThreadPool.singleton.runIfActive(eventLoop: channel.eventLoop) { Self.tcpPeer(local: local, remote: remote) }.recover { _ in nil }
        } else {
            found = channel.eventLoop.makeSucceededFuture(nil)
        }
        return found.flatMap { peer in
            guard let peer else { return channel.eventLoop.makeSucceededFuture((nil, [])) }
            if peer.uid == 0 || peer.uid == getuid() { return channel.eventLoop.makeSucceededFuture((peer, [peer.gid])) }
            return groups.groups(uid: peer.uid, gid: peer.gid, on: channel.eventLoop).map { (peer, $0) }.recover { _ in (peer, [peer.gid]) }
        }
    }

    /// The loopback TCP peer's user (sock_diag) and primary group (NSS); blocking.
    private static func tcpPeer(local: SocketAddress, remote: SocketAddress) -> PeerCredentials? {
        var uid: UInt32 = 0
        let found = local.withSockAddr { l, _ in remote.withSockAddr { r, _ in cwsb_tcp_peer_uid(l, r, &uid) } }
        guard found == 0 else { return nil }
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16384)
        let gid = getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0 && result != nil ? entry.pw_gid : uid
        // No pid: sock_diag names the socket's owner, not the process.
        return PeerCredentials(pid: 0, uid: uid, gid: gid)
    }

    static func describe(_ address: SocketAddress?) -> String {
        switch address {
        case .v4(let a)?: "tcp \(a.host):\(address?.port ?? 0)"
        case .v6(let a)?: "tcp [\(a.host)]:\(address?.port ?? 0)"
        case .unixDomainSocket?: "unix"
        case nil: "unknown"
        }
    }
}

/// Why the face refused a connection: its HTTP status and what to do.
enum Refusal: Error, Sendable, Equatable {
    case full(Int)
    case path(String, [String])
    case origin(String)
    case token
    /// The protocol's library asked for what the face does not do (Socket.IO's long-polling).
    case request(String)
    /// A resume the face cannot serve (`?stream=ID&since=SEQ`): the stream or the seq is gone.
    case gone(String)

    var status: HTTPResponseStatus {
        switch self {
        case .full: .serviceUnavailable
        case .path: .notFound
        case .origin: .forbidden
        case .token: .unauthorized
        case .request: .badRequest
        case .gone: .gone
        }
    }

    var text: String {
        switch self {
        case .full(let n): "wsbridged's WebSocket face has local.websocket.max_clients (\(n)) connections; try again later"
        case .path(let path, let paths): "no WebSocket at \(path): local.websocket.paths are \(paths.joined(separator: ", "))"
        case .origin(let origin): "origin \(origin) is not in local.websocket.allowed_origins: add it there to let its pages connect"
        case .token: "a token is needed (local.websocket.token_file): send Authorization: Bearer TOKEN, or ?access_token=TOKEN"
        case .request(let why), .gone(let why): why
        }
    }
}

/// Answers a request the face does not upgrade: why, as a short text body, then closes.
final class RefusalHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    static let name = "refusal"
    private let refusal: NIOLoopBoundBox<Refusal?>

    init(refusal: NIOLoopBoundBox<Refusal?>) { self.refusal = refusal }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .end = Self.unwrapInboundIn(data) else { return }
        let (status, text) =
            self.refusal.value.map { ($0.status, $0.text) }
            ?? (.upgradeRequired, "this is wsbridged's WebSocket face: connect with a WebSocket client (docs/websocket.md)")
        var body = context.channel.allocator.buffer(capacity: text.utf8.count + 1)
        body.writeString(text + "\n")
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
        headers.add(name: "Content-Length", value: "\(body.readableBytes)")
        headers.add(name: "Connection", value: "close")
        if status == .upgradeRequired { headers.add(name: "Upgrade", value: "websocket") }
        context.write(Self.wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        context.write(Self.wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        context.writeAndFlush(Self.wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in context.close(promise: nil) }
    }
}

@available(*, unavailable)
extension RefusalHandler: Sendable {}

/// The face could not start.
enum WebSocketFaceError: Error, CustomStringConvertible {
    case cannotListen(address: String, String)
    case token(String)

    var description: String {
        switch self {
        case .cannotListen(let address, let why):
            "cannot listen on local.websocket.listen \(address): \(why); free the port, or choose another"
        case .token(let why): why
        }
    }
}
