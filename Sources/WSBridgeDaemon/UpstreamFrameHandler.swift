import NIOCore
import NIOWebSocket

/// The last handler of an upstream channel: turns frames into calls on the link driver.
///
/// Reassembly and size limits are done before it by `NIOWebSocketFrameAggregator`, so data
/// frames arrive here as whole messages. Confined to the channel's event loop.
final class UpstreamFrameHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    /// Receives the handler's events on the event loop.
    struct Callbacks {
        var frame: (WebSocketFrame) -> Void
        var error: (any Error) -> Void
        var inactive: () -> Void
    }

    private let callbacks: Callbacks

    init(callbacks: Callbacks) {
        self.callbacks = callbacks
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.callbacks.frame(Self.unwrapInboundIn(data))
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.callbacks.error(error)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.callbacks.inactive()
        context.fireChannelInactive()
    }
}

@available(*, unavailable)
extension UpstreamFrameHandler: Sendable {}
