import Logging
import NIOCore
import NIOWebSocket
import WSBridgeCore

/// Sends: now when the link is open and writable, else into the bounded outbound queue, which
/// is flushed in order when the link opens or becomes writable again. With `queue.spool` set,
/// a queued send is stored in the spool before it is answered and joins the queue (in order)
/// once stored; a stored message leaves the spool once the socket took it.
extension UpstreamLink {
    /// Sends a message on the open link, or queues it (bounded) until the link opens.
    func submit(_ message: UpstreamMessage) -> SendOutcome {
        if self.stopping {
            return .rejected("wsbridged is shutting down; the message was not sent")
        }
        if self.outbound.isIdle, self.write(message) {
            return .sent
        }
        guard let spool = self.spool else {
            if let problem = self.outbound.append(message) {
                self.metrics.dropped(1, .outboundQueueFull)
                return .rejected(problem)
            }
            return .queued(depth: self.outbound.count)
        }
        let size = message.data.readableBytes
        if let problem = self.outbound.reserve(size) {
            self.metrics.dropped(1, .outboundQueueFull)
            return .rejected(problem)
        }
        self.lastSpoolID += 1
        let promise = self.eventLoop.makePromise(of: SendOutcome.self)
        self.spooling.append(PendingSpoolWrite(id: self.lastSpoolID, message: message, promise: promise))
        spool.append(Spool.Entry(id: self.lastSpoolID, kind: message.kind, data: message.data))
        return .spooling(promise.futureResult)
    }

    /// The spool stored (or refused) the sends up to `stored.through`: they join the queue in
    /// the order they were sent, are answered, and go out if the link takes them.
    func spoolStored(_ stored: Spool.Stored) {
        var committed = false
        while let first = self.spooling.first, first.id <= stored.through {
            self.spooling.removeFirst()
            if let failure = stored.failure {
                self.outbound.release(first.message.data.readableBytes)
                first.promise.succeed(.rejected(failure.description))
            } else {
                self.outbound.commit(first.message, spoolID: first.id)
                committed = true
                first.promise.succeed(.queued(depth: self.outbound.count))
            }
        }
        if committed { self.flushOutbound() }
    }

    /// Sends a message if the link is open. Returns false when it is not.
    func send(_ message: UpstreamMessage) -> Bool {
        self.write(message)
    }

    /// Writes a message now if it may go now: the link is open, no close frame has been sent
    /// (RFC 6455 §5.5.1: no data after it; the message waits for the next connection), and the
    /// channel is writable (a slow upstream fills the bounded queue, not NIO's buffer).
    func write(_ message: UpstreamMessage, flush: Bool = true, promise: EventLoopPromise<Void>? = nil) -> Bool {
        guard self.machine.phase == .open, self.channel?.isWritable == true else { return false }
        return self.writeSession(message, flush: flush, promise: promise)
    }

    /// Writes on the connection, open or still waiting to be ready, whether or not the channel
    /// is writable: what `write` sends once it checked, and the session's own messages (opening
    /// and sticky sends), which are few and bounded (`upstream.on_open`, `local.sticky_bytes`)
    /// and must go ahead of the queue. False when there is no connection to write to, or a
    /// close frame was sent.
    @discardableResult
    func writeSession(_ message: UpstreamMessage, flush: Bool = true, promise: EventLoopPromise<Void>? = nil) -> Bool {
        guard !self.sentClose, let channel = self.channel else { return false }
        // With permessage-deflate, PerMessageDeflateHandler compresses it on the way out.
        let frame = WebSocketFrame(fin: true, opcode: message.kind == .text ? .text : .binary, maskKey: .random(), data: message.data)
        self.messagesOut += 1
        self.bytesOut += UInt64(message.data.readableBytes)
        if flush {
            channel.writeAndFlush(frame, promise: promise)
        } else {
            channel.write(frame, promise: promise)
        }
        return true
    }

    /// A sticky send (or its leave text) from the local plane: written now if the link is
    /// open, ahead of any queued sends; false when it is not (it goes after the next open).
    func sendSession(_ message: UpstreamMessage) -> Bool {
        guard self.machine.phase == .open, !self.stopping else { return false }
        return self.writeSession(message)
    }

    /// Sends what waited, in order, with one flush, while the link takes it.
    func flushOutbound() {
        var count = 0
        while let entry = self.outbound.first {
            if entry.spoolID == 0 {
                guard self.write(entry.message, flush: false) else { break }
            } else {
                // Watched until the socket took it: then it leaves the spool. If the connection
                // dies first, it goes back to the front of the queue.
                let promise = self.eventLoop.makePromise(of: Void.self)
                guard self.write(entry.message, flush: false, promise: promise) else {
                    promise.succeed(())  // unused
                    break
                }
                self.watchSpooled(entry, promise.futureResult)
            }
            _ = self.outbound.removeFirst()
            count += 1
        }
        guard count > 0 else { return }
        self.channel?.flush()
        self.logger.debug("sent \(count) queued message(s)", metadata: ["queue.left": "\(self.outbound.count)"])
    }

    private func watchSpooled(_ entry: OutboundQueue.Entry, _ written: EventLoopFuture<Void>) {
        let generation = self.generation
        self.inFlight.append((entry, generation))
        written.assumeIsolated().whenComplete { result in
            switch result {
            case .success:
                guard let first = self.inFlight.first, first.entry.spoolID == entry.spoolID else { return }
                self.inFlight.removeFirst()
                self.noteDelivered(entry.spoolID)
            case .failure:
                // Writes complete in order: this one and every later one of its connection
                // were not written. They go first on the next connection, in order.
                var back: [OutboundQueue.Entry] = []
                while let first = self.inFlight.first, first.generation == generation {
                    back.append(first.entry)
                    self.inFlight.removeFirst()
                }
                if !back.isEmpty {
                    self.outbound.restore(back, atFront: true)
                    self.logger.info("\(back.count) spooled message(s) were not written before the connection ended: queued again")
                }
            }
        }
    }

    /// Tells the spool, once per event-loop tick, how far the upstream has taken its messages.
    private func noteDelivered(_ id: UInt64) {
        let first = self.deliveredThrough == nil
        self.deliveredThrough = max(self.deliveredThrough ?? 0, id)
        guard first else { return }
        self.eventLoop.assumeIsolated().execute {
            if let through = self.deliveredThrough { self.spool?.delivered(through: through) }
            self.deliveredThrough = nil
        }
    }

    func becameWritable(generation: Int) {
        guard generation == self.generation else { return }
        self.flushOutbound()
    }
}
