import Logging
import NIOCore
import NIOWebSocket
import WSBridgeCore
import WSBridgeProtocol

// MARK: - Frames

/// Frames from the upstream, channel errors, and the close handshake (RFC 6455 §5.5.1, §7).
extension UpstreamLink {
    /// A message of `connection` (one that has not ended: its channel's callbacks check).
    func receivedMessage(_ kind: UpstreamMessage.Kind, _ data: ByteBuffer, on connection: UpstreamConnection) {
        guard connection === self.connection else {
            self.overlapMessage(kind, data, on: connection)
            return
        }
        let read = self.connection.readTime()
        if read.first { self.messageReceived() }
        self.counted(received: data.readableBytes)
        let message = UpstreamMessage(kind: kind, data: data, receivedAtMillis: read.millis)
        if self.logger.logLevel <= .trace {
            self.logger.trace("message \(kind == .text ? "text" : "binary") \(data.readableBytes) bytes: \(message.preview)")
        }
        // A renewal's overlap: the old connection's and the new one's messages, each once.
        if !self.renewal.isOverlapping {
            self.emit(.message(message))
        } else if let layer = self.protocolOverlap {
            self.overlapRead(layer, message, side: .current, handshake: false)
        } else if let delivered = self.renewal.admit(message, fromCurrent: true) {
            self.emit(.message(delivered))
        }
        if let notice = self.configuration.upstream.renewWhen, self.isRenewalNotice(message, filter: notice) {
            self.renew(why: "upstream.renew_when = \(ConfigurationError.tomlString(notice.text)) matched")
        }
        // Fanned out first, then the session sees it: the message that makes the link ready
        // reaches subscribers before the `open` state line.
        let awaitingReady = self.attemptStep == .awaitingReady
        if self.session.observes(awaitingReady: awaitingReady), self.session.observe(message, awaitingReady: awaitingReady) {
            self.becameReady(connection)
        }
    }

    /// The socket read that brought the last messages is done: the next read reads the clocks.
    func readComplete() {
        self.connection.readComplete()
        if self.renewal.isUnderway {
            self.renewal.successor?.readComplete()
            self.renewal.retiring?.readComplete()
        }
        self.emitReadComplete()
        if self.session.observes(awaitingReady: self.attemptStep == .awaitingReady) { self.session.readComplete() }
    }

    func received(_ frame: WebSocketFrame, on connection: UpstreamConnection) {
        guard connection === self.connection else {
            self.overlapFrame(frame, on: connection)
            return
        }
        switch frame.opcode {
        case .ping:
            self.heartbeatReceived()
            self.answerPing(frame, on: self.connection)
        case .pong:
            var data = frame.unmaskedData
            let payload: UInt64? = data.readableBytes == 8 ? data.readInteger(as: UInt64.self) : nil
            if let rtt = self.heartbeatPong(payload: payload) {
                self.logger.debug("heartbeat rtt \(rtt.short)", metadata: ["heartbeat.rtt_ms": "\(Double(rtt.nanoseconds) / 1e6)"])
                self.metrics.roundTrip(rtt)
                self.emit(.roundTrip(rtt))
            }
        case .connectionClose:
            self.heartbeatReceived()
            var data = frame.unmaskedData
            let code = data.readWebSocketErrorCode().map { UInt16(webSocketErrorCode: $0) }
            let reason = data.readString(length: data.readableBytes) ?? ""
            // Echoed if ours has not gone (RFC 6455 §5.5.1), then the server ends TCP.
            self.input("closeFrame", reason: "the server's close frame") { m, _ in m.closeFrameReceived(code: code, reason: reason) }
        default:
            break
        }
    }

    func channelError(_ error: any Error, on connection: UpstreamConnection) {
        guard connection === self.connection else {
            // A renewal's other connection: it ends (its close tells the renewal).
            connection.channel?.close(promise: nil)
            return
        }
        let description: String
        var closeCode: WebSocketErrorCode?
        switch error {
        case let e as UpstreamFrameError:
            description = e.description
            closeCode = e.closeCode
        default:
            description = UpstreamConnector.describe(error)
        }
        self.logger.warning("upstream error: \(description)")
        self.failed(AttemptFailure(description: description))
        if let closeCode, self.phase == .open {
            self.input("violation", reason: description) { m, _ in m.violated(code: UInt16(webSocketErrorCode: closeCode)) }
            // Our close frame (1002, 1007, 1009) went: the server ends TCP once it has read it,
            // or the close timeout ends it (input is ignored meanwhile). Closing now would reset
            // the connection when bytes are still unread here, and a server that had not read the
            // frame yet would never learn the code (seen under load: the server logged no close).
            if self.connection.awaitingEnd { return }
        }
        self.connection.channel?.close(promise: nil)
    }

    /// Writes our close frame (the machine's close handshake said so: once per connection), and
    /// waits for the server to end TCP.
    func writeClose(code: UInt16, reason: String) {
        self.connection.writeClose(code: code, reason: reason, timeout: Self.closeTimeout) {
            self.logger.info("server did not end the connection after the close handshake; closing it")
        }
    }
}
