import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// One local client connection: reads request lines, and writes its bounded queue of lines
/// (messages shared with every other subscriber, plus its own replies) without ever letting a
/// slow reader hold up anyone else. Confined to the plane's event loop.
///
/// Bounds (each a `local.*` setting): messages by `subscriber_queue` / `subscriber_queue_bytes`
/// (the oldest dropped in O(1), with a `dropped` notice); replies and notices by
/// `client_output_bytes`: past it the client's requests are no longer read (NIO `read` is held
/// back, so the kernel's socket buffer fills and the client's writes block) until half of it
/// drained; notices alone past twice it disconnect the client. Lines already read when reading
/// stops wait in `backlog`, at most what one socket read brought. Replies keep request order
/// (`ReplyOrder`), and a client's requests are paced (`RequestPacing`) so a flood of them
/// costs its sender the wait, not the upstream or the other clients.
final class LocalClient: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let id: Int
    let credentials: PeerCredentials?
    /// The peer user's groups, looked up off the loop when the connection was accepted.
    let groups: Set<UInt32>
    /// May send upstream (root, the daemon's user, `access.write_*`), as of the last reload.
    private(set) var mayWrite: Bool
    private let plane: LocalPlane
    private var context: ChannelHandlerContext?
    /// Changed only by the fan-out (its setters are private to Fanout.swift), which keeps its
    /// subscriber list in step.
    let subscription = ClientSubscription()
    var subscribed: Bool { self.subscription.subscribed }
    var filter: Filter? { self.subscription.filter }

    private var queue: SubscriberQueue<LineBatch>
    /// Message lines written or queued for it since it connected, and those dropped (it fell behind).
    private(set) var messages: UInt64 = 0
    private(set) var drops: UInt64 = 0
    /// Message lines waiting in its queue now, and their bytes.
    var queued: (messages: Int, bytes: Int) { (self.queue.messageCount, self.queue.messageBytes) }
    private var outputLimit: Int
    private var drainScheduled = false
    /// Requests are not read while the client has too much unread output, or after its turn.
    private var outputFull = false
    private var pacing = RequestPacing()
    /// The end of the pause after a turn (cancelled when the connection ends).
    private var pauseTimer: Scheduled<Void>?
    private var readingPaused: Bool { self.outputFull || self.pacing.paused }
    /// NIO asked to read while paused: read once resumed.
    private var readHeldBack = false
    private var backlog = CircularBuffer<LocalLine>()
    private var closing = false
    /// Replies in request order (a send waiting for the spool holds its place).
    private var replies = ReplyOrder()

    /// Its socket's send buffer: small until it reads fast (`ClientSendBuffer`).
    private var sendBuffer: ClientSendBuffer
    /// The send buffer its socket has now (0: the system's default).
    var socketSendBuffer: Int { self.sendBuffer.current }
    /// It dropped messages after half a second behind (it reads slower than the feed), until its
    /// queue empties: its socket gets the small buffer unless it reads fast (`ClientSendBuffer.lagged`).
    private(set) var lagging = false
    /// It dropped messages and its queue has not emptied since (the plane's `memory` counts it).
    private var droppedSinceEmpty = false
    /// Since when its queue has not been empty (set as a line is queued for it when it was).
    private var behindSince: NIODeadline?
    /// Routed lines numbered for it in this read, not yet sent (`Fanout+Routed`).
    var routed = RoutedLines()
    /// How long a client that drops must have been behind to lag.
    static let laggingAfter = TimeAmount.milliseconds(500)

    init(id: Int, credentials: PeerCredentials?, groups: Set<UInt32>, mayWrite: Bool, plane: LocalPlane, limits: Configuration.Local) {
        self.sendBuffer = ClientSendBuffer(limits)
        self.id = id
        self.credentials = credentials
        self.groups = groups
        self.mayWrite = mayWrite
        self.plane = plane
        self.queue = SubscriberQueue(limits: Self.queueLimits(limits))
        self.outputLimit = limits.clientOutputBytes
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
        self.pauseTimer?.cancel()
        self.pauseTimer = nil
        self.queue.removeAll()
        self.caughtUp()
        self.backlog.removeAll()
        self.replies.removeAll()
        self.context = nil
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.received(.line(Self.unwrapInboundIn(data)), context)
    }

    /// A line (or a line too long) from the client, handled in its turn.
    private func received(_ line: LocalLine, _ context: ChannelHandlerContext) {
        if self.readingPaused || !self.backlog.isEmpty || self.closing {
            if !self.closing { self.backlog.append(line) }
            return
        }
        self.handle(line, context)
    }

    private func handle(_ line: LocalLine, _ context: ChannelHandlerContext) {
        self.plane.handle(line, from: self)
        if self.pacing.handled() {
            self.pauseTimer = context.eventLoop.assumeIsolated().scheduleTask(in: RequestPacing.pause) {
                self.pauseTimer = nil
                self.pacing.pauseEnded()
                if !self.outputFull { self.resumeReading(context) }
            }
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        self.pacing.readComplete()
        context.fireChannelReadComplete()
    }

    func read(context: ChannelHandlerContext) {
        if self.readingPaused {
            self.readHeldBack = true
        } else {
            context.read()
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tooLong = event as? LineTooLong { return self.received(.tooLong(limit: tooLong.limit), context) }
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

    /// The queue's bounds: `local.subscriber_queue` lines (those of the last
    /// `local.subscriber_queue_burst` past it, up to `Configuration.Local.burstMessages`) and
    /// `local.subscriber_queue_bytes`.
    static func queueLimits(_ limits: Configuration.Local) -> SubscriberQueue<LineBatch>.Limits {
        .init(
            messages: limits.subscriberQueue, bytes: limits.subscriberQueueBytes,
            burstNanoseconds: UInt64(max(0, limits.subscriberQueueBurst.nanoseconds)), burstMessages: limits.burstMessages)
    }

    /// A reload: the queue's and output's bounds, and whether it may send.
    func update(limits: Configuration.Local, policy: AccessPolicy) {
        self.mayWrite = self.credentials?.mayWrite(policy, groups: self.groups) ?? false
        self.queue.limits = Self.queueLimits(limits)
        self.queue.trimToLimits(now: NIODeadline.now().uptimeNanoseconds)
        self.outputLimit = limits.clientOutputBytes
        self.setSendBuffer(self.sendBuffer.update(small: limits.laggingSendBufferBytes))
    }

    /// Flushes what is queued (as far as the socket takes it now), then closes. Completes when closed.
    func finish(_ line: ByteBuffer?) -> EventLoopFuture<Void>? {
        guard let context = self.context else { return nil }
        if let line { self.queue.appendControl(LineBatch(line, seq: 0)) }
        self.closing = true
        self.drain()
        let closed = context.channel.closeFuture
        if self.queue.isEmpty {
            // An empty write completes after every earlier write: then close.
            context.writeAndFlush(Self.wrapOutboundOut(context.channel.allocator.buffer(capacity: 0))).assumeIsolated().whenComplete { _ in
                context.close(promise: nil)
            }
        } else {
            // Still backed up: it gets what the socket took; the rest is lost with the connection.
            context.close(promise: nil)
        }
        return closed
    }

    // MARK: - Output

    /// Queues a reply or notice: never dropped. Behind a held reply it waits its turn.
    func send(_ line: ByteBuffer) {
        guard !self.closing else { return }
        guard let line = self.replies.add(line) else {
            self.checkOutput()
            return
        }
        self.output(line)
    }

    /// Reserves the place of a reply that comes later (`fillReply`).
    func holdReply() -> ReplyOrder.Ticket {
        let ticket = self.replies.hold()
        self.checkOutput()
        return ticket
    }

    /// Puts a held reply in its place, and sends every reply that no longer waits.
    func fillReply(_ ticket: ReplyOrder.Ticket, _ line: ByteBuffer) {
        // Gone while the spool wrote: nobody to answer (the order was cleared).
        guard let context = self.context else { return }
        for line in self.replies.fill(ticket, with: line) where !self.closing {
            self.output(line)
        }
        self.resumeIfDrained(context)
    }

    private func output(_ line: ByteBuffer) {
        self.queue.appendControl(LineBatch(line, seq: 0))
        self.checkOutput()
        self.scheduleDrain()
    }

    /// Stops reading requests past the output bound; disconnects past twice it.
    private func checkOutput() {
        if self.queue.controlBytes + self.replies.bytes > self.outputLimit {
            if self.queue.controlBytes > 2 * self.outputLimit {
                self.plane.disconnect(
                    self,
                    because: "it left more than \(2 * self.outputLimit) bytes of replies and notices unread (local.client_output_bytes = \(self.outputLimit))"
                )
                return
            }
            self.outputFull = true
        }
        self.scheduleDrain()
    }

    /// Takes the lines of one flush: a client that is caught up (nothing queued, the socket
    /// taking more) is written the batch's buffer as it is, the same for every such client; one
    /// that is behind queues the batch whole (one entry, whatever its number of lines).
    func deliver(_ batch: LineBatch) {
        if self.queue.isEmpty, !self.closing, let context = self.context, context.channel.isWritable {
            self.messages &+= UInt64(batch.lineCount)
            let bytes = batch.lines.readableBytes
            context.writeAndFlush(Self.wrapOutboundOut(batch.lines), promise: nil)
            self.wrote(bytes, context)
            return
        }
        self.enqueue(batch)
    }

    /// Queues one upstream message line (a replayed one, a filter's copy): it goes out with
    /// everything else queued in this tick.
    func deliver(_ line: ByteBuffer, seq: UInt64) {
        self.enqueue(LineBatch(line, seq: seq))
    }

    /// Queues message lines (routed ones): they go out with everything else queued in this tick.
    func queue(_ batch: LineBatch) {
        self.enqueue(batch)
    }

    /// Queues message lines, dropping the oldest if this client is too far behind.
    private func enqueue(_ batch: LineBatch) {
        let now = NIODeadline.now()
        if self.queue.isEmpty { self.behindSince = now }
        if self.queue.wouldOverflow(adding: batch.lineCount, bytes: batch.lines.readableBytes, now: now.uptimeNanoseconds) {
            // Over the bound within one tick: write what the socket takes now, and drop only
            // what is really backed up.
            self.drain()
        }
        let dropped = self.queue.appendMessages(batch, seq: batch.seq, now: now.uptimeNanoseconds)
        self.messages &+= UInt64(batch.lineCount)
        if dropped > 0 {
            self.drops &+= UInt64(dropped)
            self.plane.countDrops(dropped)
            if !self.droppedSinceEmpty {
                self.droppedSinceEmpty = true
                self.plane.memory.lagBegan()
            }
            // Lagging: it drops, and has been behind (its queue never empty) for a while: a
            // reader slower than the feed, not a fast one that a burst got ahead of.
            if !self.lagging, let since = self.behindSince, now - since >= Self.laggingAfter {
                self.lagging = true
                self.setSendBuffer(self.sendBuffer.lagged())
            }
        }
        self.scheduleDrain()
    }

    /// What was written to it (`ClientSendBuffer.wrote`: it may read fast).
    private func wrote(_ bytes: Int, _ context: ChannelHandlerContext) {
        let options = context.channel.syncOptions
        self.setSendBuffer(self.sendBuffer.wrote(bytes) { (try? options?.getOption(.bufferedWritableBytes)) ?? 0 })
    }

    private func setSendBuffer(_ bytes: Int?) {
        guard let bytes, let options = self.context?.channel.syncOptions else { return }
        try? options.setOption(.socketOption(.so_sndbuf), value: SocketOptionValue(bytes))
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

    /// Writes queued lines while the socket takes them, then flushes once
    /// (`SubscriberQueue.nextWrite`: replies together, up to 64 KiB of message lines a write).
    private func drain() {
        guard let context = self.context else { return }
        var wrote = 0
        while context.channel.isWritable, let bytes = self.queue.nextWrite(allocator: context.channel.allocator) {
            wrote += bytes.readableBytes
            context.write(Self.wrapOutboundOut(bytes), promise: nil)
        }
        if wrote > 0 {
            context.flush()
            self.wrote(wrote, context)
        }
        if self.queue.isEmpty {
            self.behindSince = nil
            if self.lagging, context.channel.isWritable { self.lagging = false }
            self.caughtUp()
        }
        self.resumeIfDrained(context)
        self.subscription.drained(queueIsLow: self.queueIsLow)
    }

    /// Its queue emptied or was discarded: a lag that dropped is over.
    private func caughtUp() {
        guard self.droppedSinceEmpty else { return }
        self.droppedSinceEmpty = false
        self.plane.memory.lagEnded()
    }

    /// The queued messages take at most half the queue's bounds.
    var queueIsLow: Bool {
        self.queue.messageCount <= self.queue.limits.messages / 2 && self.queue.messageBytes <= self.queue.limits.bytes / 2
    }

    /// Reads requests again once half the output bound drained.
    private func resumeIfDrained(_ context: ChannelHandlerContext) {
        if self.outputFull, self.queue.controlBytes + self.replies.bytes <= self.outputLimit / 2 {
            self.outputFull = false
            if !self.pacing.paused { self.resumeReading(context) }
        }
    }

    /// Handles the lines read before reading stopped, then reads again (unless they filled the
    /// output once more).
    private func resumeReading(_ context: ChannelHandlerContext) {
        while !self.readingPaused, !self.closing, self.context != nil, let line = self.backlog.popFirst() {
            self.handle(line, context)
        }
        if !self.readingPaused, self.readHeldBack {
            self.readHeldBack = false
            context.read()
        }
    }

    /// Sends a last line saying why, then closes the connection.
    func close(saying line: ByteBuffer) {
        guard let context = self.context, !self.closing else { return }
        self.closing = true
        self.backlog.removeAll()
        self.queue.removeAll()
        self.caughtUp()
        // Closed once the line is written, or after a grace period if the client reads nothing.
        let grace = context.eventLoop.assumeIsolated().scheduleTask(in: .seconds(2)) { context.close(promise: nil) }
        context.writeAndFlush(Self.wrapOutboundOut(line)).assumeIsolated().whenComplete { _ in
            grace.cancel()
            context.close(promise: nil)
        }
    }
}

@available(*, unavailable)
extension LocalClient: Sendable {}
