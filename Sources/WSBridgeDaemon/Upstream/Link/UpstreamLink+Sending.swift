import Logging
import NIOCore
import NIOWebSocket
import WSBridgeCore
import WSBridgeProtocol

// MARK: - Heartbeat

/// The heartbeat's pings (and application heartbeat text) on the open connection.
extension UpstreamLink {
    /// Writes a heartbeat ping with `payload` (and the application heartbeat text, if any) on
    /// `connection` (the current one, or a renewal's new one), unless a close frame went on it.
    func writePing(_ payload: UInt64, on connection: UpstreamConnection) {
        guard self.mayWrite(on: connection), let channel = connection.channel else { return }
        var buffer = channel.allocator.buffer(capacity: 8)
        buffer.writeInteger(payload)
        self.writeControl(WebSocketFrame(fin: true, opcode: .ping, maskKey: .random(), data: buffer), on: connection)
        if let text = self.configuration.heartbeat.text {
            self.writeOwn(OutboundMessage(.text(text)), on: connection)
        }
    }

    /// No close frame went on `connection`, the current one or a renewal's other one (RFC 6455
    /// §5.5.1: nothing but the close handshake after it).
    func mayWrite(on connection: UpstreamConnection) -> Bool {
        connection === self.connection ? self.mayWrite : self.renewal.isSuccessor(connection) != nil && self.otherMayWrite
    }

    /// The server's ping on any of the link's connections (the current one, a renewal's
    /// other): its pong, unless our close frame went on that connection.
    func answerPing(_ ping: WebSocketFrame, on connection: UpstreamConnection) {
        guard self.mayWrite(on: connection) else { return }
        self.writeControl(WebSocketFrame(fin: true, opcode: .pong, maskKey: .random(), data: ping.unmaskedData), on: connection)
    }

    /// A ping or a pong on `connection`: now, or, when the connection is paced and they count
    /// (`upstream.limits.count_pings`), first among what waits for its pace.
    func writeControl(_ frame: WebSocketFrame, on connection: UpstreamConnection) {
        guard let channel = connection.channel else { return }
        if self.configuration.upstream.limits.countPings, let pacing = connection.pacing {
            guard let frame = pacing.own(frame, first: true, now: self.now) else {
                self.armPacing(pacing, on: connection)
                return
            }
            channel.writeAndFlush(frame, promise: nil)
            return
        }
        channel.writeAndFlush(frame, promise: nil)
    }
}

// MARK: - Sending

/// Sends: now when the link is open and writable, else into the bounded outbound queue, which
/// is flushed in order when the link opens or becomes writable again. With `queue.spool` set,
/// a queued send is stored in the spool before it is answered and joins the queue (in order)
/// once stored; a stored message leaves the spool once the socket took it.
extension UpstreamLink {
    /// Sends a message on the open link, or queues it (bounded) until the link opens.
    func send(_ message: OutboundMessage) -> SendOutcome {
        if self.isShuttingDown {
            return .rejected("wsbridged is shutting down; the message was not sent")
        }
        return self.outbound.send(message, on: self)
    }

    /// The spool stored (or refused) the sends up to `stored.through`.
    func spoolStored(_ stored: Spool.Stored) {
        if self.outbound.stored(stored) { self.flushOutbound() }
    }

    /// Writes a message now if it may go now: the link is open, no close frame has been sent
    /// (RFC 6455 §5.5.1: no data after it; the message waits for the next connection), and the
    /// channel is writable (a slow upstream fills the bounded queue, not NIO's buffer).
    /// A paced connection (`upstream.limits`) takes it only when the pace allows: else it waits
    /// in the queue, and the pace's timer flushes it in its turn.
    /// What a send queued now waits for: the link, the pace (it held the queue last time), or
    /// its turn.
    var sendsWait: SendWait {
        guard self.phase == .open else { return .link }
        return self.connection.pacing?.queueHeld == true ? .pace : .turn
    }

    func sendNow(_ message: OutboundMessage, flush: Bool = true, promise: EventLoopPromise<Void>? = nil) -> Bool {
        guard self.phase == .open, self.connection.channel?.isWritable == true else { return false }
        if let pacing = self.connection.pacing, !pacing.mayWriteQueued(now: self.now) {
            self.armPacing(pacing)
            return false
        }
        return self.writeFrame(message, flush: flush, promise: promise)
    }

    /// Writes on the connection, open or still waiting to be ready, whether or not the channel
    /// is writable: what `sendNow` sends once it checked (and the pace allowed). False when
    /// there is no connection to write to, or a close frame was sent.
    @discardableResult
    func writeFrame(_ message: OutboundMessage, flush: Bool = true, promise: EventLoopPromise<Void>? = nil) -> Bool {
        guard self.mayWrite, let channel = self.connection.channel else { return false }
        self.counted(sent: message.data.readableBytes)
        if let frames = self.connection.frames {
            frames.send(text: message.kind == .text, message.data, promise: promise)
        } else {
            // With permessage-deflate, PerMessageDeflateHandler compresses it on the way out.
            let frame = WebSocketFrame(fin: true, opcode: message.kind == .text ? .text : .binary, maskKey: .random(), data: message.data)
            channel.write(frame, promise: promise)
        }
        if flush { self.connection.flushSoon(on: self.eventLoop) }
        return true
    }

    /// Writes a message of the link's own (opening messages, sticky sends and their leave
    /// texts, the protocol's keepalive), ahead of the queue: they are few and bounded
    /// (`upstream.on_open`, `local.sticky_bytes`), and go whether or not the channel is
    /// writable. On a paced connection, in their turn (before any queued send). False when
    /// there is no connection to write to, or a close frame was sent.
    @discardableResult
    func writeOwn(_ message: OutboundMessage) -> Bool {
        guard self.connection.pacing != nil else { return self.writeFrame(message) }
        guard self.mayWrite else { return false }
        return self.writeOwn(message, on: self.connection)
    }

    /// Writes a message of the link's own on `connection` (the current one, or a renewal's
    /// second one while its session is restored), paced as it is.
    @discardableResult
    func writeOwn(_ message: OutboundMessage, on connection: UpstreamConnection) -> Bool {
        guard let channel = connection.channel else { return false }
        let frame = WebSocketFrame(fin: true, opcode: message.kind == .text ? .text : .binary, maskKey: .random(), data: message.data)
        if let pacing = connection.pacing {
            guard let frame = pacing.own(frame, now: self.now) else {
                self.armPacing(pacing, on: connection)
                return true
            }
            self.counted(sent: frame.data.readableBytes)
            channel.write(frame, promise: nil)
        } else {
            self.counted(sent: frame.data.readableBytes)
            channel.write(frame, promise: nil)
        }
        connection.flushSoon(on: self.eventLoop)
        return true
    }

    /// A sticky send (or its leave text) from the local plane: written now if the link is
    /// open, ahead of any queued sends (on a paced connection, in its turn ahead of them); false
    /// when it is not (it goes after the next open).
    func sendAhead(_ message: OutboundMessage, key: String? = nil) -> Bool {
        guard self.phase == .open, !self.isShuttingDown else { return false }
        // A renewal's connection, its session restored, takes it too: it must carry every
        // subscription before it can take over.
        if let successor = self.renewal.successor, self.renewalMachine.successorReady {
            self.writeOwn(message, on: successor)
            if let key { self.renewalSent(key) }
        }
        return self.writeOwn(message)
    }

    /// Sends what waited, in order, with one flush, while the link takes it; returns how many.
    @discardableResult
    func flushOutbound() -> Int {
        let count = self.outbound.flush(to: self)
        guard count > 0 else { return 0 }
        self.connection.channel?.flush()
        self.logger.debug("sent \(count) queued message(s)", metadata: ["queue.left": "\(self.outbound.count)"])
        return count
    }

    // MARK: - The pace

    /// Wakes the link when the pace lets the next message go.
    func armPacing(_ pacing: PacedWrites, on connection: UpstreamConnection? = nil) {
        let connection = connection ?? self.connection
        pacing.timer.arm(at: pacing.next(now: self.now)) { self.pacingTick(on: connection) }
    }

    /// The pace lets messages go: the link's own that waited first, then the queue's, as many
    /// as it allows; then it waits again if anything is left. A renewal's second connection
    /// has only its own (until it takes over: it is then the current one). The pace's timer
    /// stops with its connection.
    func pacingTick(on connection: UpstreamConnection) {
        guard !connection.ended, let pacing = connection.pacing, let channel = connection.channel else { return }
        let frames = pacing.due(now: self.now)
        for frame in frames {
            if frame.opcode == .text || frame.opcode == .binary { self.counted(sent: frame.data.readableBytes) }
            channel.write(frame, promise: nil)
        }
        if !frames.isEmpty { channel.flush() }
        let queued = self.phase == .open && connection === self.connection ? self.flushOutbound() : 0
        self.counted(paced: frames.count + queued)
        if pacing.settle() { self.armPacing(pacing, on: connection) }
    }

    func becameWritable(on connection: UpstreamConnection) {
        guard connection === self.connection else { return }
        self.flushOutbound()
    }
}
