import NIOCore
import WSBridgeProtocol

/// One local client connection: reads request lines, and writes its bounded queue of lines
/// (messages shared with every other subscriber, plus its own replies) without ever letting a
/// slow reader hold up anyone else. Confined to the plane's event loop.
final class LocalClient: ChannelInboundHandler {
    typealias InboundIn = LocalLine
    typealias OutboundOut = ByteBuffer

    private struct Entry {
        var line: ByteBuffer
        /// Message sequence number; nil for replies and notices, which are never dropped.
        var seq: UInt64?
    }

    let id: Int
    let credentials: PeerCredentials?
    var mayWrite: Bool
    private let plane: LocalPlane
    private var context: ChannelHandlerContext?
    var subscribed = true
    var filter: Filter?

    private var queue = CircularBuffer<Entry>(initialCapacity: 16)
    private var queuedMessages = 0
    private var queuedBytes = 0
    private var maxMessages: Int
    private var maxBytes: Int
    private var drainScheduled = false
    /// Messages dropped since the last `dropped` notice: count and seq range.
    private var dropped: (count: UInt64, from: UInt64, to: UInt64)?

    init(id: Int, credentials: PeerCredentials?, mayWrite: Bool, plane: LocalPlane, maxMessages: Int, maxBytes: Int) {
        self.id = id
        self.credentials = credentials
        self.mayWrite = mayWrite
        self.plane = plane
        self.maxMessages = maxMessages
        self.maxBytes = maxBytes
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func channelActive(context: ChannelHandlerContext) {
        self.plane.added(self)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.plane.removed(self)
        self.queue.removeAll()
        self.context = nil
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.plane.handle(Self.unwrapInboundIn(data), from: self)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // Input closed (the client shut down its sending side): keep writing to it.
        if let event = event as? ChannelEvent, event == .inputClosed { return }
        context.fireUserInboundEventTriggered(event)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { self.drain() }
        context.fireChannelWritabilityChanged()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A broken client connection concerns only this client.
        context.close(promise: nil)
    }

    func updateLimits(maxMessages: Int, maxBytes: Int) {
        self.maxMessages = maxMessages
        self.maxBytes = maxBytes
    }

    /// Flushes what is queued (as far as the socket takes it now), then closes. Completes when closed.
    func finish(_ line: ByteBuffer?) -> EventLoopFuture<Void>? {
        guard let context = self.context else { return nil }
        if let line { self.queue.append(Entry(line: line, seq: nil)) }
        self.drain()
        let closed = context.channel.closeFuture
        if self.queue.isEmpty {
            // An empty write completes after every earlier write: then close.
            context.writeAndFlush(Self.wrapOutboundOut(context.channel.allocator.buffer(capacity: 0))).assumeIsolated().whenComplete { _ in
                context.close(promise: nil)
            }
        } else {
            // Still backed up: it gets what the socket took; the rest is lost with the process.
            context.close(promise: nil)
        }
        return closed
    }

    // MARK: - Output

    /// Queues a reply or notice: never dropped.
    func send(_ line: ByteBuffer) {
        self.queue.append(Entry(line: line, seq: nil))
        self.scheduleDrain()
    }

    /// Queues an upstream message line (shared buffer). Drops the oldest messages if this
    /// client is too far behind.
    func deliver(_ line: ByteBuffer, seq: UInt64) {
        self.queue.append(Entry(line: line, seq: seq))
        self.queuedMessages += 1
        self.queuedBytes += line.readableBytes
        if self.queuedMessages > self.maxMessages || self.queuedBytes > self.maxBytes {
            // Over the bound within one tick: write what the socket takes now, and drop only
            // what is really backed up.
            self.drain()
            if self.queuedMessages > self.maxMessages || self.queuedBytes > self.maxBytes {
                self.dropOldest()
            }
        }
        self.scheduleDrain()
    }

    private func dropOldest() {
        var kept = CircularBuffer<Entry>(initialCapacity: self.queue.count)
        // Drop from the front until within limits (leaving room), keeping replies and notices.
        while let entry = self.queue.popFirst() {
            if let seq = entry.seq, self.queuedMessages > self.maxMessages || self.queuedBytes > self.maxBytes {
                self.queuedMessages -= 1
                self.queuedBytes -= entry.line.readableBytes
                if let d = self.dropped {
                    self.dropped = (d.count + 1, d.from, seq)
                } else {
                    self.dropped = (1, seq, seq)
                }
                self.plane.countDrop()
                continue
            }
            kept.append(entry)
        }
        self.queue = kept
    }

    private func scheduleDrain() {
        guard !self.drainScheduled, let context = self.context else { return }
        self.drainScheduled = true
        // Once per event-loop tick: every line queued in this tick goes out with one flush.
        context.eventLoop.assumeIsolated().execute {
            self.drainScheduled = false
            self.drain()
        }
    }

    /// Writes queued lines while the socket takes them, then flushes once. Consecutive lines go
    /// out as one buffer (up to 64 KiB): one pipeline write per batch instead of per message.
    private func drain() {
        guard let context = self.context else { return }
        var wrote = false
        // Drops happen only when lines are queued (never during a drain): the notice goes first.
        if self.dropped != nil, self.queue.first?.seq != nil || self.queue.isEmpty, context.channel.isWritable {
            self.writeDroppedNotice(context)
            wrote = true
        }
        while context.channel.isWritable, let first = self.queue.popFirst() {
            self.account(first)
            var batch: ByteBuffer?
            while let next = self.queue.first, (batch?.readableBytes ?? first.line.readableBytes) < 64 * 1024 {
                if batch == nil {
                    batch = context.channel.allocator.buffer(capacity: min(64 * 1024 + 4096, first.line.readableBytes * (self.queue.count + 1)))
                    batch!.writeImmutableBuffer(first.line)
                }
                batch!.writeImmutableBuffer(next.line)
                self.account(self.queue.removeFirst())
            }
            context.write(Self.wrapOutboundOut(batch ?? first.line), promise: nil)
            wrote = true
        }
        if wrote { context.flush() }
    }

    private func account(_ entry: Entry) {
        guard entry.seq != nil else { return }
        self.queuedMessages -= 1
        self.queuedBytes -= entry.line.readableBytes
    }

    private func writeDroppedNotice(_ context: ChannelHandlerContext) {
        guard let d = self.dropped else { return }
        self.dropped = nil
        let notice: JSONValue = [
            "type": "dropped", "count": .number(Double(d.count)), "from": .number(Double(d.from)), "to": .number(Double(d.to)),
            "reason": "this subscriber fell behind by more than local.subscriber_queue messages or local.subscriber_queue_bytes bytes",
        ]
        context.write(Self.wrapOutboundOut(MessageLineEncoder.line(notice, allocator: context.channel.allocator)), promise: nil)
    }
}

@available(*, unavailable)
extension LocalClient: Sendable {}
