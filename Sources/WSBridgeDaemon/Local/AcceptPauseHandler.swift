import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// Stops accepting for a while when accept(2) fails for want of resources (out of file
/// descriptors, most often), instead of spinning on a listening socket that stays readable.
///
/// NIO's own `AcceptBackoffHandler` cannot do this here: after a failed accept NIO keeps its
/// read pending and the socket registered, so the handler's held-back `read` never matters and
/// epoll reports the socket again at once (seen with strace: ~5,000 failing accept4 calls per
/// second at 100 % CPU). Turning `autoRead` off unregisters the socket; turning it back on after
/// the pause accepts again. Confined to the listening channel's event loop.
final class AcceptPauseHandler: ChannelInboundHandler {
    typealias InboundIn = any Channel

    /// Called with the first failure of an episode; returns how long to pause each time.
    private let failed: (IOError) -> TimeAmount
    /// Called with the first connection accepted after an episode of failures.
    private let recovered: () -> Void
    private var pause: TimeAmount = .milliseconds(200)
    private var failing = false
    private var resume: Scheduled<Void>?

    init(failed: @escaping (IOError) -> TimeAmount, recovered: @escaping () -> Void) {
        self.failed = failed
        self.recovered = recovered
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // Connections accepted in the same read before a failure arrive before the error; any
        // arriving while `failing` was accepted after a pause.
        if self.failing {
            self.failing = false
            self.recovered()
        }
        context.fireChannelRead(data)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let error = error as? IOError, [EMFILE, ENFILE, ENOBUFS, ENOMEM].contains(error.errnoCode) else {
            context.fireErrorCaught(error)
            return
        }
        if !self.failing {
            self.failing = true
            self.pause = self.failed(error)
        }
        guard self.resume == nil, let options = context.channel.syncOptions else { return }
        try? options.setOption(.autoRead, value: false)
        self.resume = context.eventLoop.assumeIsolated().scheduleTask(in: self.pause) {
            self.resume = nil
            try? context.channel.syncOptions?.setOption(.autoRead, value: true)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.resume?.cancel()
        self.resume = nil
    }
}

@available(*, unavailable)
extension AcceptPauseHandler: Sendable {}
