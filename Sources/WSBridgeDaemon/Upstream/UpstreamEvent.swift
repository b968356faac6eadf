import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// A message received from the upstream, reassembled from its frames.
package struct UpstreamMessage: Sendable {
    package enum Kind: Sendable, Equatable {
        case text
        case binary
    }

    package var kind: Kind
    package var data: ByteBuffer
    /// Wall-clock receive time, milliseconds since the Unix epoch.
    package var receivedAtMillis: Int64

    package init(kind: Kind, data: ByteBuffer, receivedAtMillis: Int64) {
        self.kind = kind
        self.data = data
        self.receivedAtMillis = receivedAtMillis
    }
}

/// A message to send upstream: an app's send, an opening message, a sticky send or its leave
/// text, a protocol's own. What the link receives is an `UpstreamMessage`.
package struct OutboundMessage: Sendable {
    package var kind: UpstreamMessage.Kind
    package var data: ByteBuffer

    package init(kind: UpstreamMessage.Kind, data: ByteBuffer) {
        self.kind = kind
        self.data = data
    }

    /// From a local client's payload (or a configured text).
    init(_ payload: Payload) {
        switch payload {
        case .text(let t): self.init(kind: .text, data: ByteBuffer(string: t))
        case .binary(let b): self.init(kind: .binary, data: ByteBuffer(bytes: b))
        }
    }
}

extension UpstreamMessage {
    /// The start of the payload for a trace log line: text (newlines as spaces) or hex.
    var preview: String {
        let limit = 120
        var data = self.data
        switch self.kind {
        case .text:
            let bytes = data.readBytes(length: min(limit, data.readableBytes)) ?? []
            let text = String(String(decoding: bytes, as: UTF8.self).map { $0.isNewline ? " " : $0 })
            return self.data.readableBytes > limit ? text + "…" : text
        case .binary:
            let bytes = data.readBytes(length: min(32, data.readableBytes)) ?? []
            let hex = bytes.map { b in (b < 16 ? "0" : "") + String(b, radix: 16) }.joined()
            return self.data.readableBytes > 32 ? hex + "…" : hex
        }
    }
}

/// What the upstream link reports to its observers (logs, local subscribers, tests).
package enum UpstreamEvent: Sendable {
    /// The link entered a new phase; `reason` says why (the close, error or request behind it);
    /// `closedRightAfterOpen`: the link it ends lasted less than `backoff.stable_after` (the
    /// state machine's verdict, `LinkStateMachine.Transition`).
    case state(ConnectionPhase, reason: String, closedRightAfterOpen: Bool = false)
    /// A connection attempt started, to `url` (one of `upstream.urls`).
    case attempt(number: Int, url: UpstreamURL)
    /// A retry was scheduled after `delay`.
    case retryScheduled(attempt: Int, delay: Duration)
    /// A heartbeat ping was answered.
    case roundTrip(Duration)
    /// An upstream message.
    case message(UpstreamMessage)
}

/// The last thing that went wrong with the link or an attempt: `status`'s `last_error` and
/// `last_error_reason`, and the `reason` label of `wsbridge_connect_failures_total`.
struct AttemptFailure {
    enum Kind: String, CaseIterable, Sendable {
        case error
        /// No upstream message matched `upstream.ready_when` within `upstream.ready_timeout`.
        case notReady = "not_ready"
    }
    var description: String
    var kind: Kind = .error
}
