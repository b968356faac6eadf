import NIOCore

/// A SOCKS5 CONNECT (RFC 1928) with username/password authentication (RFC 1929), which
/// NIOSOCKS's client does not offer. Used only when the proxy URL carries credentials; it offers
/// only that method, so credentials are never silently dropped. Completes `promise` once the
/// tunnel is up (then removes itself), or fails it saying what the proxy answered.
final class SOCKS5AuthClientHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private enum State {
        case greeting, authenticating, connecting, done
    }

    private let host: String
    private let port: Int
    private let username: [UInt8]
    private let password: [UInt8]
    private let promise: EventLoopPromise<Void>
    private var state = State.greeting
    private var started = false
    private var pending = ByteBuffer()

    init(host: String, port: Int, username: String, password: String, promise: EventLoopPromise<Void>) {
        self.host = host
        self.port = port
        self.username = Array(username.utf8)
        self.password = Array(password.utf8)
        self.promise = promise
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { self.start(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        self.start(context)
        context.fireChannelActive()
    }

    private func start(_ context: ChannelHandlerContext) {
        guard !self.started else { return }
        self.started = true
        guard self.username.count <= 255, self.password.count <= 255, Array(self.host.utf8).count <= 255 else {
            return self.fail(context, .tooLong)
        }
        // Version 5, one method: 0x02 username/password.
        context.writeAndFlush(Self.wrapOutboundOut(context.channel.allocator.buffer(bytes: [5, 1, 2])), promise: nil)
    }

    typealias OutboundOut = ByteBuffer

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = Self.unwrapInboundIn(data)
        self.pending.writeBuffer(&bytes)
        self.advance(context)
    }

    private func advance(_ context: ChannelHandlerContext) {
        while true {
            switch self.state {
            case .greeting:
                guard let reply = self.pending.readBytes(length: 2) else { return }
                guard reply[0] == 5 else { return self.fail(context, .notSOCKS5(version: reply[0])) }
                guard reply[1] == 2 else {
                    return self.fail(context, .noPasswordMethod(chose: reply[1]))
                }
                var auth = context.channel.allocator.buffer(capacity: 3 + self.username.count + self.password.count)
                auth.writeBytes([1, UInt8(self.username.count)] + self.username + [UInt8(self.password.count)] + self.password)
                context.writeAndFlush(Self.wrapOutboundOut(auth), promise: nil)
                self.state = .authenticating
            case .authenticating:
                guard let reply = self.pending.readBytes(length: 2) else { return }
                // RFC 1929: version 1 of the subnegotiation, then the status.
                guard reply[0] == 1 else { return self.fail(context, .passwordReplyVersion(reply[0])) }
                guard reply[1] == 0 else { return self.fail(context, .passwordRefused) }
                let name = Array(self.host.utf8)
                var request = context.channel.allocator.buffer(capacity: 7 + name.count)
                // CONNECT to a domain name (the proxy resolves it; IP literals are names too).
                request.writeBytes([5, 1, 0, 3, UInt8(name.count)] + name + [UInt8(self.port >> 8), UInt8(self.port & 0xFF)])
                context.writeAndFlush(Self.wrapOutboundOut(request), promise: nil)
                self.state = .connecting
            case .connecting:
                guard self.pending.readableBytes >= 5, let head = self.pending.getBytes(at: self.pending.readerIndex, length: 5) else { return }
                guard head[0] == 5 else { return self.fail(context, .connectReplyVersion(head[0])) }
                guard head[1] == 0 else { return self.fail(context, .connectFailed(reply: head[1])) }
                let address: Int
                switch head[3] {
                case 1: address = 4
                case 4: address = 16
                case 3: address = 1 + Int(head[4])
                default: return self.fail(context, .unknownAddressType(head[3]))
                }
                guard self.pending.readableBytes >= 4 + address + 2 else { return }
                self.pending.moveReaderIndex(forwardBy: 4 + address + 2)
                self.state = .done
                // The next stage adds its handlers behind this one when the promise succeeds;
                // then what the proxy sent after its reply goes on to them, and this one leaves.
                let leftover = self.pending
                self.pending = ByteBuffer()
                self.promise.succeed(())
                if leftover.readableBytes > 0 { context.fireChannelRead(Self.wrapInboundOut(leftover)) }
                context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
                return
            case .done:
                return
            }
        }
    }

    private func fail(_ context: ChannelHandlerContext, _ problem: SOCKS5Problem) {
        guard self.state != .done else { return }
        self.state = .done
        self.promise.fail(UpstreamConnector.Failure.socks(problem))
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if self.state != .done {
            self.state = .done
            self.promise.fail(UpstreamConnector.Failure.socks(.closed))
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if self.state != .done {
            self.state = .done
            self.promise.fail(error)
        }
        context.fireErrorCaught(error)
    }
}

@available(*, unavailable)
extension SOCKS5AuthClientHandler: Sendable {}

/// What a SOCKS5 proxy did wrong, or refused (RFC 1928, RFC 1929): every text is here.
enum SOCKS5Problem: Sendable, CustomStringConvertible {
    case tooLong
    case notSOCKS5(version: UInt8)
    case noPasswordMethod(chose: UInt8)
    case passwordReplyVersion(UInt8)
    case passwordRefused
    case connectReplyVersion(UInt8)
    case connectFailed(reply: UInt8)
    case unknownAddressType(UInt8)
    case closed

    var description: String {
        switch self {
        case .tooLong: "a SOCKS5 user name, password and host name hold at most 255 bytes each"
        case .notSOCKS5(let version): "the proxy does not speak SOCKS5 (version \(version))"
        case .noPasswordMethod(let method): "the SOCKS5 proxy does not accept user name and password authentication (it chose method \(method))"
        case .passwordReplyVersion(let version): "the SOCKS5 proxy answered the user name and password with version \(version), not 1"
        case .passwordRefused: "the SOCKS5 proxy refused the user name and password in the proxy URL"
        case .connectReplyVersion(let version): "the SOCKS5 proxy answered the CONNECT with version \(version), not 5"
        case .connectFailed(let reply): "the SOCKS5 proxy could not connect: \(Self.reply(reply))"
        case .unknownAddressType(let type): "the SOCKS5 proxy sent an unknown address type \(type)"
        case .closed: "the SOCKS5 proxy closed the connection"
        }
    }

    /// RFC 1928 §6's reply field.
    private static func reply(_ code: UInt8) -> String {
        switch code {
        case 1: "general failure"
        case 2: "not allowed by its rules"
        case 3: "network unreachable"
        case 4: "host unreachable"
        case 5: "connection refused"
        case 6: "TTL expired"
        case 7: "command not supported"
        case 8: "address type not supported"
        default: "reply \(code)"
        }
    }
}
