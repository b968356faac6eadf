import NIOCore
import NIOWebSocket
import WSBridgeCore

/// The WebSocket face's subscribers (`upstream.protocol = "raw"`: every upstream message to
/// each of them as a frame, text or binary as it came), and the frames of the messages
/// published since the last flush, one after another in one buffer: each message is framed
/// once, and every app is handed the same bytes (docs/websocket.md).
struct FrameFanout {
    private(set) var apps: [WebSocketApp] = []
    private var unsent = ByteBuffer()
    private var unsentCount = 0
    private let allocator = ByteBufferAllocator()

    var isEmpty: Bool { self.apps.isEmpty }

    mutating func add(_ app: WebSocketApp) { self.apps.append(app) }

    mutating func remove(_ app: WebSocketApp) { self.apps.removeAll { $0 === app } }

    /// Frames `message` behind the others of this flush.
    mutating func append(_ message: UpstreamMessage) {
        if self.unsentCount == 0 { self.unsent = self.allocator.buffer(capacity: message.data.readableBytes + 10) }
        ServerFrame.write(message.kind == .text ? .text : .binary, message.data, into: &self.unsent)
        self.unsentCount += 1
    }

    /// The frames of this flush to every app.
    mutating func flush() {
        guard self.unsentCount > 0 else { return }
        let (frames, count) = (self.unsent, self.unsentCount)
        self.unsent = ByteBuffer()
        self.unsentCount = 0
        for app in self.apps { app.deliver(frames, messages: count) }
    }
}
