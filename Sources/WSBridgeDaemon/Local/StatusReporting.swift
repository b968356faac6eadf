import WSBridgeProtocol

extension LocalPlane {
    /// The `status` reply: the link's own snapshot (the one source of truth for link state) with
    /// the fan-out's counters.
    func statusReport() -> StatusReport {
        var report = self.link.status
        report.subscribers = self.fanout.subscriberCount
        report.clients = self.fanout.clientCount
        report.seq = self.fanout.seq
        report.drops = self.fanout.drops
        return report
    }
}
