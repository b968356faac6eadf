import WSBridgeCore
import WSBridgeProtocol

/// The one-line STATUS= that `systemctl status` shows: "open wss://host, rtt 12 ms, 3
/// subscribers", and ", NOT accepting clients" while accept(2) fails. Sent when it changed
/// (state, RTT, subscribers, accepting), never twice the same. Confined to the link's event loop.
final class SystemdStatus {
    private var last = ""
    private let post: (String) -> Void
    /// Why the local socket accepts no client now (out of file descriptors), while it does not.
    private(set) var notAccepting: String?

    /// `post` sends the text; by default to systemd (a no-op outside a unit).
    init(post: @escaping (String) -> Void = { Systemd.status($0) }) {
        self.post = post
    }

    func update(link: any LinkControl, subscribers: Int) {
        let text = self.summary(link: link, subscribers: subscribers)
        guard text != self.last else { return }
        self.last = text
        self.post(text)
    }

    /// Sends the line even if unchanged (READY=1 after a start or a reload goes with it).
    func post(link: any LinkControl, subscribers: Int) {
        self.last = self.summary(link: link, subscribers: subscribers)
        self.post(self.last)
    }

    /// accept(2) failed (`reason`) or works again (nil).
    func accepting(failed reason: String?, link: any LinkControl, subscribers: Int) {
        self.notAccepting = reason
        self.update(link: link, subscribers: subscribers)
    }

    func summary(link: any LinkControl, subscribers: Int) -> String {
        let url = link.url
        var parts = ["\(link.phase.rawValue) \(url.scheme.rawValue)://\(url.hostHeader)"]
        if link.phase == .open, let rtt = link.roundTripTime {
            parts.append("rtt \(Int((rtt.seconds * 1000).rounded())) ms")
        }
        parts.append("\(subscribers) subscriber\(subscribers == 1 ? "" : "s")")
        if self.notAccepting != nil { parts.append("NOT accepting clients") }
        return parts.joined(separator: ", ")
    }
}

@available(*, unavailable)
extension SystemdStatus: Sendable {}
