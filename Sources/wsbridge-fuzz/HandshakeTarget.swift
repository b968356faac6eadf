// A debug (or fuzzing) build only: the targets reach the daemon's internals through @testable,
// which a release build does not allow (`swift build -c release` builds a stub, Replay.swift).
#if DEBUG || FUZZING
    import NIOConcurrencyHelpers
    import NIOCore
    import NIOEmbedded
    import WSBridgeCore

    @testable import WSBridgeDaemon

    /// What a server or a proxy answers before the first frame, through the connector's real
    /// pipelines on an EmbeddedChannel: the HTTP upgrade response, an HTTP CONNECT reply, a SOCKS5
    /// reply, and SOCKS5 with its username/password step (RFC 1929). The first input byte picks
    /// which; the rest is what the peer sends, then the connection ends.
    ///
    /// Properties: the attempt always ends (a success, or a failure that says something) by the
    /// time the connection has closed; an upgrade succeeds only on a 101 with a subprotocol that
    /// was offered; a tunnel opens only on a 2xx (CONNECT) or a SOCKS5 success reply, and what the
    /// peer sent after that reply reaches the next stage whole and in order.
    enum HandshakeTarget {
        /// RFC 6455 §1.3's example key (its accept value is s3pPLMBiTxaQ9kYGzzhZRbK+xOo=), so that
        /// inputs can pass the accept check and reach what follows it.
        static let requestKey = "dGhlIHNhbXBsZSBub25jZQ=="
        static let offered = ["v2.feed", "v1.feed"]

        /// How one attempt ended (the subprotocol chosen, or what the failure said), and what
        /// reached the stage after the tunnel. Not the handshake itself: it holds the channel,
        /// whose pipeline holds this box.
        struct Outcome {
            var handshake: Result<String?, Failure>?
            var tunnelled = false
            var forwarded: [UInt8] = []
        }

        static func run(_ bytes: [UInt8]) {
            guard bytes.count >= 2 else { return }
            let reply = Array(bytes.dropFirst(2))
            let read = bytes[1] == 0 ? max(1, reply.count) : Int(bytes[1])
            switch bytes[0] % 4 {
            case 0: Self.upgrade(reply, read: read)
            case 1: Self.tunnel(reply, read: read, through: .httpConnect, credentials: false)
            case 2: Self.tunnel(reply, read: read, through: .socks5, credentials: false)
            default: Self.tunnel(reply, read: read, through: .socks5, credentials: true)
            }
        }

        static func connector(_ proxy: ProxyURL.Kind?, credentials: Bool) -> UpstreamConnector {
            var upstream = Configuration.Upstream()
            upstream.url = UpstreamURL(scheme: .ws, host: "upstream.test", port: 8080, path: "/feed")
            upstream.subprotocols = Self.offered
            upstream.maxMessageSize = FramesTarget.maxMessageSize
            let proxyURL = proxy.map {
                ProxyURL(kind: $0, host: "proxy.test", port: 3128, username: credentials ? "user" : nil, password: credentials ? "secret" : nil)
            }
            return UpstreamConnector(upstream: upstream, tls: .init(), proxy: proxyURL, token: nil, sslContext: nil)
        }

        /// Feeds `reply` in reads of `read` bytes to an active EmbeddedChannel set up by `setUp`,
        /// then closes it.
        static func attempt(
            _ reply: [UInt8],
            read: Int,
            _ setUp: (EmbeddedChannel, EventLoopPromise<UpstreamConnector.Handshake>, NIOLockedValueBox<Outcome>) throws -> Void
        ) -> Outcome {
            let channel = EmbeddedChannel()
            let outcome = NIOLockedValueBox(Outcome())
            let handshake = channel.eventLoop.makePromise(of: UpstreamConnector.Handshake.self)
            handshake.futureResult.whenComplete { result in
                let ended = result.map(\.subprotocol).mapError { Failure(description: "\($0)") }
                outcome.withLockedValue { $0.handshake = ended }
            }
            do {
                try setUp(channel, handshake, outcome)
                try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 8080)).wait()
            } catch {
                fatalError("the pipeline could not be set up: \(error)")
            }
            var at = 0
            while at < reply.count, channel.isActive {
                _ = try? channel.writeInbound(ByteBuffer(bytes: reply[at..<min(reply.count, at + read)]))
                channel.embeddedEventLoop.run()
                at += read
            }
            _ = try? channel.close().wait()
            // Past every deadline: the CONNECT handler's timer (set on the real clock, ahead of the
            // embedded loop's) holds its handler, and the channel through it, until it runs.
            channel.embeddedEventLoop.run()
            channel.embeddedEventLoop.advanceTime(to: .now() + .hours(1))
            channel.embeddedEventLoop.run()
            // Not complete when the peer sent a whole, valid answer and the attempt is waiting for
            // the next stage's own handshake; a closed connection must end every other attempt.
            let result = outcome.withLockedValue { $0 }
            if result.handshake == nil, !result.tunnelled {
                fatalError("the attempt did not end when the connection closed")
            }
            if case .failure(let error)? = result.handshake, error.description.isEmpty {
                fatalError("an attempt failed without saying why")
            }
            // After a tunnel the attempt waits for the next stage (the upgrade), which this target
            // stands in for; a live link's next stage fails it when the connection closes.
            if result.tunnelled { handshake.fail(Failure(description: "the connection closed after the tunnel")) }
            return result
        }

        static func upgrade(_ reply: [UInt8], read: Int) {
            let connector = Self.connector(nil, credentials: false)
            let outcome = Self.attempt(reply, read: read) { channel, handshake, _ in
                try connector.addWebSocketHandlers(to: channel, sslContext: nil, handshake: handshake, requestKey: Self.requestKey) { _, deflate in
                    FramesTarget.handler(deflate, FramesTarget.Recorder())
                }
            }
            guard case .success(let chosen)? = outcome.handshake else { return }
            guard Self.message(reply).starts(with: Array("HTTP/1.1 101".utf8)) else {
                fatalError("an upgrade succeeded without HTTP/1.1 101: \(String(decoding: reply.prefix(40), as: UTF8.self))")
            }
            guard let chosen, Self.offered.contains(chosen) else {
                fatalError("an upgrade succeeded with subprotocol \(chosen ?? "none"), offered \(Self.offered)")
            }
        }

        static func tunnel(_ reply: [UInt8], read: Int, through kind: ProxyURL.Kind, credentials: Bool) {
            let connector = Self.connector(kind, credentials: credentials)
            let outcome = Self.attempt(reply, read: read) { channel, handshake, outcome in
                let next: @Sendable (any Channel) -> Void = { channel in
                    outcome.withLockedValue { $0.tunnelled = true }
                    try? channel.pipeline.syncOperations.addHandler(ForwardedBytes(outcome))
                }
                switch kind {
                case .httpConnect: try connector.addHTTPConnect(to: channel, handshake: handshake, then: next)
                case .socks5: try connector.addSOCKS(to: channel, handshake: handshake, then: next)
                }
            }
            guard outcome.tunnelled else { return }
            switch kind {
            case .httpConnect:
                let message = Self.message(reply)
                let status = message.count >= 12 ? Int(String(decoding: message.dropFirst(9).prefix(3), as: UTF8.self)) : nil
                guard message.starts(with: Array("HTTP/1.".utf8)), let status, (200..<300).contains(status) else {
                    fatalError("a CONNECT tunnel opened without a 2xx reply: \(String(decoding: reply.prefix(40), as: UTF8.self))")
                }
                // Bytes in the read that ends a CONNECT reply are a proxy's error (in ws:// and
                // wss:// alike the client speaks first): NIO's HTTP decoder does not stop at a 2xx
                // to CONNECT, so they never reach the next stage. Reads after that one are the
                // next stage's and reach it whole and in order: what it got starts at a read
                // boundary past the reply's header block.
                let from = reply.count - outcome.forwarded.count
                guard from >= 0, from == reply.count || from % read == 0, Array(reply[max(0, from)...]) == outcome.forwarded else {
                    fatalError("bytes the CONNECT reply's read held reached the next stage: \(outcome.forwarded.count) of \(reply.count), reads of \(read)")
                }
                let head = reply[..<from]
                guard from == reply.count || head.firstRange(of: Array("\n\r\n".utf8)) != nil || head.firstRange(of: Array("\n\n".utf8)) != nil else {
                    fatalError("bytes reached the next stage before the CONNECT reply's header block ended")
                }
            case .socks5:
                guard let length = Self.socksReplyLength(reply, credentials: credentials) else {
                    fatalError("a SOCKS5 tunnel opened without a success reply: \(reply.prefix(16))")
                }
                guard outcome.forwarded == Array(reply.dropFirst(length)) else {
                    fatalError("after the SOCKS5 reply, \(reply.count - length) bytes were sent but \(outcome.forwarded.count) reached the next stage")
                }
            }
        }

        /// A reply without the empty lines before it, which a recipient skips (RFC 9112 §2.2; llhttp
        /// does).
        static func message(_ reply: [UInt8]) -> ArraySlice<UInt8> {
            reply.drop { $0 == UInt8(ascii: "\r") || $0 == UInt8(ascii: "\n") }
        }

        /// The length of a valid SOCKS5 method choice, optional RFC 1929 status and CONNECT success
        /// reply at the start of `reply`, or nil.
        static func socksReplyLength(_ reply: [UInt8], credentials: Bool) -> Int? {
            var at = 0
            guard reply.count >= 2, reply[0] == 5, reply[1] == (credentials ? 2 : 0) else { return nil }
            at = 2
            if credentials {
                guard reply.count >= at + 2, reply[at] == 1, reply[at + 1] == 0 else { return nil }
                at += 2
            }
            guard reply.count >= at + 5, reply[at] == 5, reply[at + 1] == 0 else { return nil }
            let address: Int
            switch reply[at + 3] {
            case 1: address = 4
            case 4: address = 16
            case 3: address = 1 + Int(reply[at + 4])
            default: return nil
            }
            let length = at + 4 + address + 2
            return reply.count >= length ? length : nil
        }
    }

    /// What an attempt's failure said.
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// The next stage after a tunnel: records the bytes that reach it.
    final class ForwardedBytes: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let outcome: NIOLockedValueBox<HandshakeTarget.Outcome>

        init(_ outcome: NIOLockedValueBox<HandshakeTarget.Outcome>) {
            self.outcome = outcome
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let bytes = Self.unwrapInboundIn(data).readableBytesView
            self.outcome.withLockedValue { $0.forwarded += bytes }
        }
    }
#endif
