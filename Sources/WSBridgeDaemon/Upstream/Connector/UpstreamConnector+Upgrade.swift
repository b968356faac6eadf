import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOSSL
import NIOWebSocket
import WSBridgeCore
import WSBridgeProtocol

/// TLS (when wss://), the HTTP/1.1 upgrade with headers, token, subprotocols and the
/// permessage-deflate offer, then the frame handlers.
extension UpstreamConnector {
    /// `requestKey`: the Sec-WebSocket-Key, random; the fuzzer fixes it to reach what follows
    /// the accept check.
    func addWebSocketHandlers(
        to channel: any Channel,
        sslContext: NIOSSLContext?,
        handshake: EventLoopPromise<Handshake>,
        requestKey: String = NIOWebSocketClientUpgrader.randomRequestKey(),
        makeFrameHandler: @escaping @Sendable (any Channel, PerMessageDeflate?) throws -> UpstreamFrameHandler
    ) throws {
        let sync = channel.pipeline.syncOperations
        if let sslContext {
            try sync.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: self.serverHostname))
        }
        let url = self.upstream.url
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: url.hostHeader)
        headers.add(name: "User-Agent", value: WSBridgeVersion.userAgent)
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
            requestKey: requestKey,
            maxFrameSize: maxMessageSize,  // NIO's decoder is replaced by ours, which holds this bound too
            // Our frame handler reads the frames and reports their errors (the link closes with
            // the code each one calls for).
            enableAutomaticErrorHandling: false,
            upgradePipelineHandler: { channel, response in
                channel.eventLoop.makeCompletedFuture {
                    // The status recorder only matters for a refused upgrade, and must be gone
                    // before anything here can throw: a failed upgrade hands the bytes that came
                    // behind the 101 (frames, as raw bytes) down the pipeline, and the recorder
                    // takes only HTTP parts (a server's 101 with a bad extension and a frame in
                    // the same read crashed the daemon; found by the handshake fuzz target).
                    channel.pipeline.syncOperations.removeHandler(name: "wsb.status", promise: nil)
                    // RFC 6455 4.1: the server's answer is an HTTP/1.1 status line; NIO's upgrader
                    // looks only at the code (an HTTP/1.0 101 was taken; found by the handshake
                    // fuzz target).
                    guard response.version == .http1_1 else {
                        throw Failure.upgradeNotHTTP11(major: response.version.major, minor: response.version.minor)
                    }
                    let chosen = response.headers.first(name: "Sec-WebSocket-Protocol")
                    if let chosen, !offered.contains(chosen) {
                        throw Failure.subprotocolNotOffered(chosen: chosen, offered: offered)
                    }
                    if offered.count > 0 && chosen == nil {
                        throw Failure.noSubprotocolChosen(offered: offered)
                    }
                    let extensions = response.headers[canonicalForm: "Sec-WebSocket-Extensions"].joined(separator: ", ")
                    let deflate: DeflateParameters?
                    do throws(DeflateParameters.NegotiationError) {
                        deflate = try DeflateParameters.negotiate(response: extensions, offered: offerDeflate)
                    } catch {
                        throw Failure.extensions(error)
                    }
                    // With permessage-deflate: one context pair, the encoder compressing what goes
                    // out and the frame handler inflating what comes in.
                    // Our frame encoder in front of NIO's, which it writes past (one write per
                    // frame, a faster mask), before anything can write a frame (the decoder's
                    // removal below hands the frame handler the bytes behind the 101, which may
                    // make it close).
                    let encoder = try channel.pipeline.syncOperations.context(handlerType: WebSocketFrameEncoder.self)
                    try channel.pipeline.syncOperations.addHandler(UpstreamFrameEncoder(), position: .after(encoder.handler))
                    let compression = try deflate.map { try PerMessageDeflate(parameters: $0) }
                    if let compression { try channel.pipeline.syncOperations.addHandler(PerMessageDeflateEncoder(deflate: compression)) }
                    // Our frame handler reads the frames from the bytes, in place of NIO's
                    // decoder: it goes in front of it (the bytes that came behind the 101 are
                    // handed on as soon as this closure is done, before a removal would have
                    // taken effect), and the decoder, which then never sees a byte, goes.
                    let decoder = try channel.pipeline.syncOperations.context(handlerType: ByteToMessageHandler<WebSocketFrameDecoder>.self)
                    try channel.pipeline.syncOperations.addHandler(makeFrameHandler(channel, compression), position: .before(decoder.handler))
                    channel.pipeline.syncOperations.removeHandler(context: decoder, promise: nil)
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
        // After the upgrade handler: a refused upgrade's response head reaches it once the
        // upgrade handler has reported the refusal and left the pipeline. The refusal is told
        // when the recorder has seen the head (or the connection ended without one).
        let status = ResponseStatusRecorder(eventLoop: channel.eventLoop)
        try sync.addHandler(status, name: "wsb.status")
        upgraded.assumeIsolated().whenComplete { result in
            switch result {
            case .success(let upgraded?):
                handshake.succeed(upgraded)
            case .success(nil):
                status.status.assumeIsolated().whenSuccess { status in
                    let code = status.map { " (HTTP \($0.code) \($0.reasonPhrase))" } ?? ""
                    handshake.fail(Failure.upgradeRefused(status: code))
                    channel.close(promise: nil)
                }
            case .failure(let error):
                handshake.fail(
                    error as? Failure ?? Failure.handshake(UpstreamConnector.describeHandshake(error, tls: url.isTLS, name: self.tls.serverName ?? url.host))
                )
                channel.close(promise: nil)
            }
        }
    }
}

/// The status of a refused upgrade's response, for the error message: `status` completes
/// with it once the head arrives, or with nil if the handler leaves the pipeline (an accepted
/// upgrade removes it; so does the connection's end) without one. Confined to the channel's
/// event loop.
final class ResponseStatusRecorder: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart

    private let seen: EventLoopPromise<HTTPResponseStatus?>

    init(eventLoop: any EventLoop) {
        self.seen = eventLoop.makePromise()
    }

    var status: EventLoopFuture<HTTPResponseStatus?> { self.seen.futureResult }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(let head) = Self.unwrapInboundIn(data) {
            self.seen.succeed(head.status)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        // A second completion is ignored: the head's status stays.
        self.seen.succeed(nil)
    }
}

@available(*, unavailable)
extension ResponseStatusRecorder: Sendable {}

extension UpstreamConnector {
    /// The SNI / verification name: `tls.server_name`, else the URL's host unless it is an IP literal.
    var serverHostname: String? {
        if let name = self.tls.serverName { return name }
        let host = self.upstream.url.host
        return (try? SocketAddress(ipAddress: host, port: 0)) == nil ? host : nil
    }
}
