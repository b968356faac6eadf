import WSBridgeCore
import WSBridgeProtocol

extension FleetPublisher {
    /// `status`'s `fleet`.
    var status: StatusReport.Fleet {
        var report = StatusReport.Fleet(
            state: self.state.rawValue, stream: self.fleet.stream, subject: self.fleet.subject, acknowledged: self.acknowledged,
            acknowledgedThrough: self.acknowledgedThrough, lag: Int(self.numberedThrough - min(self.numberedThrough, self.acknowledgedThrough)),
            inFlight: self.inFlight.count, waiting: self.waiting.count + (self.spill?.buffer.count ?? 0), lost: self.lost, lastError: self.lastError)
        report.role = "bridge"
        report.lease = self.lease?.state
        if self.remoteApps.count > 0 { report.followerApps = self.remoteApps.count }
        report.server = self.connection.flatMap { self.state == .connected ? self.library.connectedURL($0) : nil }
        return report
    }
}

extension FleetPublisher {
    /// `body` with `text` as a C string, or NULL.
    static func withOptionalCString<T>(_ text: String?, _ body: (UnsafePointer<CChar>?) -> T) -> T {
        guard let text else { return body(nil) }
        return text.withCString { body($0) }
    }
}

/// A value the NATS client shares across threads (its handles are thread-safe).
struct UnsafeSendable<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
