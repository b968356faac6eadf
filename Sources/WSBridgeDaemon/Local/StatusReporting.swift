import WSBridgeCore
import WSBridgeProtocol

extension LocalPlane {
    /// The `status` reply: the link's own snapshot (the one source of truth for link state) with
    /// the fan-out's counters.
    /// `asker`: the client asking. A control connection (not subscribed, like wsbridgectl's) is
    /// not counted among the clients; a subscriber asking is one, and counts.
    func statusReport(askedBy asker: LocalClient? = nil) -> StatusReport {
        var report = self.link.status
        self.fanout.report(into: &report, askedBy: asker)
        report.refusedClients = self.refusedClients
        report.notAccepting = self.notAccepting
        report.service = self.service
        if let appProtocol = self.appProtocol {
            let session = appProtocol.session
            report.protocol = .init(
                name: session.name,
                subscriptions: session.liveSubscriptions.map { live in
                    .init(
                        upstreamId: live.upstreamID, key: live.key,
                        holders: live.holders.map { holder in
                            let credentials = self.fanout.clients[holder.app]?.credentials
                            return .init(client: holder.app, pid: credentials?.pid, uid: credentials?.uid, id: holder.id)
                        }, since: live.since, setAside: live.setAside)
                }, culprit: session.culprit, serverError: appProtocol.serverError?.text, serverErrorAt: appProtocol.serverError?.at)
        }
        return report
    }
}

extension LocalPlane {
    /// The metrics in the Prometheus text format, the gauges set from the live state now.
    func metricsText(askedBy asker: LocalClient? = nil) -> [UInt8] {
        let report = self.statusReport(askedBy: asker)
        let input = MetricFamily.Input(
            status: report, urls: self.configuration.upstream.urls.map(\.description), nowMillis: WallClock.millisecondsSinceEpoch())
        return self.fanout.metrics.render(input)
    }
}
