import Logging
import NIOCore
import NIOWebSocket
import WSBridgeCore

/// Frames from the upstream, channel errors, and the close handshake (RFC 6455 §5.5.1, §7).
extension UpstreamLink {
    func receivedMessage(_ kind: UpstreamMessage.Kind, _ data: ByteBuffer, generation: Int) {
        guard generation == self.generation else { return }
        // The clocks are read once per socket read, not per message: a read of 64 KiB can hold
        // hundreds of messages, all received at the same moment.
        let receivedAt: Int64
        if let at = self.readWallMillis {
            receivedAt = at
        } else {
            receivedAt = WallClock.millisecondsSinceEpoch()
            self.readWallMillis = receivedAt
            self.heartbeat?.received(now: Self.now())
        }
        self.messagesIn += 1
        self.bytesIn += UInt64(data.readableBytes)
        let message = UpstreamMessage(kind: kind, data: data, receivedAtMillis: receivedAt)
        if self.logger.logLevel <= .trace {
            self.logger.trace("message \(kind == .text ? "text" : "binary") \(data.readableBytes) bytes: \(message.preview)")
        }
        self.emit(.message(message))
        // Fanned out first, then the session sees it: the message that makes the link ready
        // reaches subscribers before the `open` state line.
        if self.session.observes, self.session.observe(message) { self.becameReady(generation: generation) }
    }

    /// The socket read that brought the last messages is done: the next read reads the clocks.
    func readComplete() {
        self.readWallMillis = nil
        if self.session.observes { self.session.readComplete() }
    }

    func received(_ frame: WebSocketFrame, generation: Int) {
        guard generation == self.generation else { return }
        let now = Self.now()
        switch frame.opcode {
        case .ping:
            self.heartbeat?.received(now: now)
            if !self.sentClose {
                let pong = WebSocketFrame(fin: true, opcode: .pong, maskKey: .random(), data: frame.unmaskedData)
                self.channel?.writeAndFlush(pong, promise: nil)
            }
        case .pong:
            var data = frame.unmaskedData
            let payload: UInt64? = data.readableBytes == 8 ? data.readInteger(as: UInt64.self) : nil
            if let rtt = self.heartbeat?.receivedPong(payload: payload, now: now) {
                self.logger.debug("heartbeat rtt \(rtt.short)", metadata: ["heartbeat.rtt_ms": "\(Double(rtt.nanoseconds) / 1e6)"])
                self.metrics.roundTrip(rtt)
                self.emit(.roundTrip(rtt))
            }
        case .connectionClose:
            self.heartbeat?.received(now: now)
            var data = frame.unmaskedData
            let code = data.readWebSocketErrorCode().map { UInt16(webSocketErrorCode: $0) }
            let reason = data.readString(length: data.readableBytes) ?? ""
            // Only the first close frame counts; a peer must not send another.
            if self.receivedClose == nil { self.receivedClose = (code, reason) }
            if !self.sentClose {
                // Echo the close (RFC 6455 §5.5.1), then wait for the server to end TCP.
                self.sendClose(code: code ?? 1000, reason: "")
            }
        default:
            break
        }
    }

    func channelError(_ error: any Error, generation: Int) {
        guard generation == self.generation else { return }
        let description: String
        var closeCode: WebSocketErrorCode?
        switch error {
        case let e as UpstreamProtocolError:
            description = e.description
            closeCode = e.closeCode
        case NIOWebSocketError.invalidFrameLength:
            description = "upstream sent a frame larger than upstream.max_message_size (\(self.configuration.upstream.maxMessageSize) bytes)"
        case let e as NIOWebSocketError:
            description = "upstream violated the WebSocket protocol: \(e)"
        default:
            description = UpstreamConnector.describe(error)
        }
        self.logger.warning("upstream error: \(description)")
        self.lastError = AttemptFailure(description: description)
        if self.linkError == nil { self.linkError = description }
        if error is NIOWebSocketError {
            // NIO's WebSocketProtocolErrorHandler already sent the close frame and closes the channel.
            self.sentClose = true
        } else if let closeCode, !self.sentClose && self.machine.phase == .open {
            self.sendClose(code: UInt16(webSocketErrorCode: closeCode), reason: "")
        }
        self.channel?.close(promise: nil)
    }

    func sendClose(code: UInt16, reason: String) {
        guard let channel = self.channel, !self.sentClose else { return }
        self.sentClose = true
        var buffer = channel.allocator.buffer(capacity: 2 + reason.utf8.count)
        buffer.writeInteger(code)
        buffer.writeString(String(reason.utf8.prefix(123)) ?? "")
        let frame = WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: buffer)
        channel.writeAndFlush(frame, promise: nil)
        let generation = self.generation
        self.closeTimer?.cancel()
        self.closeTimer = self.eventLoop.assumeIsolated().scheduleTask(in: Self.closeTimeout) {
            guard generation == self.generation else { return }
            self.logger.info("server did not end the connection after the close handshake; closing it")
            self.channel?.close(promise: nil)
        }
    }
}
