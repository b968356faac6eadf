import ArgumentParser
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOTLS
import NIOWebSocket

#if canImport(Glibc)
    import Glibc
#endif

/// A loopback WebSocket server for the demo, tests and benchmarks.
///
/// It echoes messages, can broadcast a ticker, and takes fault commands on stdin (listed in its
/// --help, below) and reports events on stdout.
@main
struct TestServer: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "wsbridge-testserver",
        abstract: "Loopback WebSocket server with fault modes, for wsbridge's demo, tests and benchmarks.",
        discussion: """
            It echoes every message back (to every client) and serves until SIGINT or SIGTERM, or \
            `quit` on stdin. It takes commands on stdin, one per line:
              send TEXT                   broadcast TEXT
              ticker RATE [SIZE [COUNT]]  broadcast {"tick":N,...} RATE times a second
              ticker off                  stop it
              burst N [SIZE]              N numbered messages ({"n":N,...}) at once
              close CODE [REASON]         close every client with CODE
              drop                        drop every connection without a close frame
              pings on|off                answer pings (off: a dead peer for the
                                          heartbeat)
              refuse on|off               refuse upgrades with 403
              linger on|off               keep the TCP connection after a close handshake
              stall on|off                stop reading from clients (a slow upstream)
              poison [TEXT]               close (4400) a client whose message contains
                                          TEXT (no TEXT: off)
              acks SIZE [HOLD]|off        answer each Socket.IO emit with an ack id
                                          (42N[...]) with its ack,
                                          43N[{"n":K,"pad":"x..."}] of SIZE bytes; HOLD:
                                          keep them until HOLD are ready, then write them
                                          at once
              oversize BYTES              one binary message of BYTES
              count                       print `clients N`
              quit                        stop
            It reports events on stdout, one per line: `listening PORT`, `upgrade ...`, \
            `connected N`, `message TEXT`, `ping`, `closed CODE REASON`, `disconnected N`.
            When stdin is a pipe, its end stops the server (the program driving it went away). \
            With stdin at /dev/null or a file's end, or started in the background of a terminal \
            (`&`), it takes no (more) commands and serves on until SIGINT or SIGTERM, saying so \
            on stderr.
            """
    )

    @Option(help: "Address to listen on (loopback by default).")
    var host = "127.0.0.1"

    @Option(help: "Port to listen on; 0 picks a free one (printed as `listening PORT`).")
    var port = 0

    @Option(help: "Broadcast a ticker at this many messages per second (0: off).")
    var ticker = 0

    @Option(help: "Ticker message size in bytes.")
    var size = 64

    @Flag(inversion: .prefixedNo, help: "Echo every message back.")
    var echo = true

    @Flag(help: "Stamp message events with their receive time: `message@NANOSECONDS TEXT` (CLOCK_MONOTONIC).")
    var stamp = false

    @Option(help: "Subprotocol to accept when offered.")
    var subprotocol: [String] = []

    @Option(help: "TLS certificate chain (PEM): serve wss.")
    var cert: String?

    @Option(help: "TLS private key (PEM).")
    var key: String?

    @Option(help: "Require a client certificate signed by this CA (PEM): mutual TLS.")
    var clientCa: String?

    @Option(help: "Largest frame accepted from clients.")
    var maxFrame = 1 << 24

    func validate() throws {
        guard (self.cert == nil) == (self.key == nil) else {
            throw ValidationError("--cert and --key go together")
        }
    }

    func run() throws {
        signal(SIGPIPE, SIG_IGN)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        var sslContext: NIOSSLContext?
        if let cert = self.cert, let key = self.key {
            var tls = TLSConfiguration.makeServerConfiguration(
                certificateChain: try NIOSSLCertificate.fromPEMFile(cert).map { .certificate($0) },
                privateKey: .privateKey(try NIOSSLPrivateKey(file: key, format: .pem))
            )
            if let ca = self.clientCa {
                tls.trustRoots = .file(ca)
                tls.certificateVerification = .noHostnameVerification
            }
            sslContext = try NIOSSLContext(configuration: tls)
        }
        let state = try loop.submit {
            NIOLoopBound(ServerState(echo: self.echo, stamp: self.stamp), eventLoop: loop)
        }.wait()
        let subprotocols = self.subprotocol
        let maxFrame = self.maxFrame
        let tlsContext = sslContext
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    if let tlsContext {
                        let sni = ByteToMessageHandler(
                            SNIHandler { result in
                                if case .hostname(let name) = result { Output.line("sni \(name)") } else { Output.line("sni none") }
                                return channel.eventLoop.makeSucceededVoidFuture()
                            }
                        )
                        try sync.addHandler(sni)
                        try sync.addHandler(NIOSSLServerHandler(context: tlsContext))
                    }
                    let upgrader = NIOWebSocketServerUpgrader(
                        maxFrameSize: maxFrame,
                        automaticErrorHandling: true,
                        shouldUpgrade: { channel, head in
                            channel.eventLoop.submit {
                                let s = state.value
                                let auth = head.headers.first(name: "Authorization") ?? "-"
                                let offered = head.headers[canonicalForm: "Sec-WebSocket-Protocol"].map(String.init)
                                Output.line(
                                    "upgrade path=\(head.uri) authorization=\(auth) protocols=\(offered.joined(separator: ",")) ua=\(head.headers.first(name: "User-Agent") ?? "-")"
                                )
                                if s.refuse { return nil }
                                var headers = HTTPHeaders()
                                if let chosen = offered.first(where: { subprotocols.contains($0) }) {
                                    headers.add(name: "Sec-WebSocket-Protocol", value: chosen)
                                }
                                return headers
                            }
                        },
                        upgradePipelineHandler: { channel, _ in
                            channel.eventLoop.makeCompletedFuture {
                                channel.pipeline.syncOperations.removeHandler(name: "refuser", promise: nil)
                                try channel.pipeline.syncOperations.addHandler(
                                    NIOWebSocketFrameAggregator(
                                        minNonFinalFragmentSize: 0, maxAccumulatedFrameCount: 100_000, maxAccumulatedFrameSize: maxFrame)
                                )
                                try channel.pipeline.syncOperations.addHandler(ServerConnectionHandler(state: state))
                                // The benchmark generator writes encoded frames in front of the encoder.
                                let encoder = try channel.pipeline.syncOperations.handler(type: WebSocketFrameEncoder.self)
                                try channel.pipeline.syncOperations.addHandler(FloodWriter(), position: .before(encoder))
                            }
                        }
                    )
                    try sync.configureHTTPServerPipeline(
                        withServerUpgrade: (upgraders: [upgrader], completionHandler: { _ in }),
                        withErrorHandling: true
                    )
                    try sync.addHandler(RefusingHTTPHandler(), name: "refuser")
                }
            }
        let server = try bootstrap.bind(host: self.host, port: self.port).wait()
        Output.line("listening \(server.localAddress?.port ?? 0)")
        if self.ticker > 0 {
            let (rate, size) = (self.ticker, self.size)
            loop.execute { state.value.startTicker(rate: rate, size: size, loop: loop) }
        }
        // SIGINT and SIGTERM stop it (their default action), even when started by a process whose
        // threads block or ignore them (both are inherited across exec).
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGINT)
        sigaddset(&signals, SIGTERM)
        pthread_sigmask(SIG_UNBLOCK, &signals, nil)
        signal(SIGINT, SIG_DFL)
        signal(SIGTERM, SIG_DFL)
        // Commands from stdin until `quit`. In the background of a terminal, reading it would stop
        // the process (SIGTTIN): no commands then. A pipe's end means the controlling program
        // went away: stop. /dev/null or a file: no (more) commands, serve on until a signal.
        var quit = false
        var status = stat()
        let fromPipe = fstat(0, &status) == 0 && ((status.st_mode & S_IFMT) == S_IFIFO || (status.st_mode & S_IFMT) == S_IFSOCK)
        if isatty(0) != 0 && tcgetpgrp(0) != getpgrp() {
            Output.error("wsbridge-testserver: in the background of a terminal: no commands on stdin; serving until SIGINT or SIGTERM")
        } else {
            while let line = readLine() {
                let words = line.split(separator: " ", maxSplits: 2).map(String.init)
                guard let command = words.first else { continue }
                if command == "quit" {
                    quit = true
                    break
                }
                loop.execute { state.value.command(command, Array(words.dropFirst()), loop: loop) }
            }
            if !quit && fromPipe {
                Output.error("wsbridge-testserver: stdin (a pipe) closed: stopping")
                quit = true
            } else if !quit {
                Output.error("wsbridge-testserver: stdin is at its end: no more commands; serving until SIGINT or SIGTERM")
            }
        }
        if !quit {
            // SIGINT and SIGTERM end the process (their default); wait for them.
            try? server.closeFuture.wait()
        }
        try? server.close().wait()
        try? group.syncShutdownGracefully()
    }
}

enum Output {
    static func line(_ text: String) {
        Self.write(text, to: 1)
    }

    static func error(_ text: String) {
        Self.write(text, to: 2)
    }

    private static func write(_ text: String, to fd: Int32) {
        var s = text + "\n"
        s.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let n = Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset)
                if n <= 0 { return }
                offset += n
            }
        }
    }
}

/// Answers plain HTTP requests (and refused upgrades) with 403.
final class RefusingHTTPHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .end = Self.unwrapInboundIn(data) else { return }
        Output.line("refused")
        var headers = HTTPHeaders()
        headers.add(name: "Content-Length", value: "0")
        headers.add(name: "Connection", value: "close")
        context.write(Self.wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .forbidden, headers: headers))), promise: nil)
        context.writeAndFlush(Self.wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in
            context.close(promise: nil)
        }
    }
}

@available(*, unavailable)
extension RefusingHTTPHandler: Sendable {}
