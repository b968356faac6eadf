import WSBridgeCore
import WSBridgeProtocol

/// The one-line STATUS= that `systemctl status` shows: "open wss://host, rtt 12 ms, 3
/// subscribers". Sent when it changed (state, RTT or subscribers), never twice the same.
/// Confined to the link's event loop.
final class SystemdStatus {
    private var last = ""
    private let post: (String) -> Void

    /// `post` sends the text; by default to systemd (a no-op outside a unit).
    init(post: @escaping (String) -> Void = { Systemd.status($0) }) {
        self.post = post
    }

    func update(link: any LinkControl, subscribers: Int) {
        let text = Self.summary(link: link, subscribers: subscribers)
        guard text != self.last else { return }
        self.last = text
        self.post(text)
    }

    static func summary(link: any LinkControl, subscribers: Int) -> String {
        let url = link.url
        var parts = ["\(link.phase.rawValue) \(url.scheme.rawValue)://\(url.hostHeader)"]
        if link.phase == .open, let rtt = link.roundTripTime {
            parts.append("rtt \(Int((rtt.seconds * 1000).rounded())) ms")
        }
        parts.append("\(subscribers) subscriber\(subscribers == 1 ? "" : "s")")
        return parts.joined(separator: ", ")
    }
}

@available(*, unavailable)
extension SystemdStatus: Sendable {}
