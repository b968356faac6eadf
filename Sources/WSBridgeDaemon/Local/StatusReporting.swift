import WSBridgeCore
import WSBridgeProtocol

extension LocalPlane {
    /// The `status` reply: the link's own snapshot (the one source of truth for link state) with
    /// the fan-out's counters.
    /// `asker`: the client asking. A control connection (not subscribed, like wsbridgectl's) is
    /// not counted among the clients; a subscriber asking is one, and counts.
    func statusReport(askedBy asker: LocalClient? = nil) -> StatusReport {
        var report = self.link.status
        report.subscribers = self.fanout.subscriberCount
        report.clients = self.fanout.clientCount - (asker.map { $0.subscribed ? 0 : 1 } ?? 0)
        report.seq = self.fanout.seq
        report.drops = self.fanout.drops
        report.stream = self.fanout.stream
        report.refusedClients = self.refusedClients
        report.notAccepting = self.notAccepting
        report.service = self.service
        if let journal = self.fanout.journal {
            let st = journal.statistics
            report.journal = .init(
                dir: journal.directory, fsync: journal.configuration.fsync.rawValue, state: st.stopped == nil ? "writing" : "stopped",
                stoppedReason: st.stopped, bytes: st.bytes, segments: st.segments, oldestSeq: st.oldestSeq, newestSeq: st.newestSeq,
                oldestTs: st.oldestMillis, newestTs: st.newestMillis, fsyncs: st.fsyncs, notJournaled: st.notJournaled,
                replaying: self.fanout.replayingReaders, opened: journal.recovered.opened)
        }
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
