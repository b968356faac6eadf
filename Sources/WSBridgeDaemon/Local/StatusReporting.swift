import WSBridgeCore
import WSBridgeProtocol

extension LocalPlane {
    /// The `status` reply: the link's own snapshot (the one source of truth for link state) with
    /// the fan-out's counters and the fleet publisher's report, each read from its owner.
    /// `asker`: the client asking. A control connection (not subscribed, like wsbridgectl's) is
    /// not counted among the clients; a subscriber asking is one, and counts.
    func statusReport(askedBy asker: LocalClient? = nil) -> StatusReport {
        var report = self.link.status
        self.fanout.report(into: &report, askedBy: asker)
        if let fleet = self.fleet { report.fleet = fleet.status }
        if self.webSocket.limits.isOn { report.websocket = self.webSocketReport }
        report.refusedClients = self.refusedClients
        report.notAccepting = self.notAccepting
        report.service = self.service
        // Every connection's subscriptions, each with its connection (several); the first culprit.
        var merged: StatusReport.ApplicationProtocol?
        for member in self.protocolMembers?.protocolMembers ?? [] {
            member.layer.report(into: &report, connection: member.connection)
            guard var all = merged, let one = report.protocol else {
                merged = report.protocol
                continue
            }
            all.subscriptions += one.subscriptions
            all.culprit = all.culprit ?? one.culprit
            if (one.serverErrorAt ?? 0) > (all.serverErrorAt ?? 0) { (all.serverError, all.serverErrorAt) = (one.serverError, one.serverErrorAt) }
            merged = all
        }
        report.protocol = merged
        return report
    }
}

extension LocalPlane {
    /// The metrics in the Prometheus text format, the gauges set from the live state now.
    func metricsText(askedBy asker: LocalClient? = nil) -> [UInt8] {
        let report = self.statusReport(askedBy: asker)
        let input = MetricFamily.Input(
            status: report, urls: self.configuration.upstream.urls.map(\.description), nowMillis: WallClock.millisecondsSinceEpoch())
        return self.metrics.render(input)
    }
}

extension LocalPlane {
    /// The `clients` reply: every local client now, by number.
    var clientList: ClientsResult {
        let held = self.protocolSubscriptionsByApp
        let clients = self.fanout.clients.values.sorted { $0.id < $1.id }.map { c in
            let queued = c.queued
            var client = ClientsResult.Client(
                id: c.id, pid: c.credentials?.pid, uid: c.credentials?.uid, subscribed: c.subscribed, filter: c.filter?.text, messages: c.messages,
                queued: queued.messages, queueBytes: queued.bytes, drops: c.drops)
            if c.lagging { client.lagging = true }
            if c.socketSendBuffer > 0 { client.sendBuffer = c.socketSendBuffer }
            return client
        }
        let all = (clients + self.webSocketClients).sorted { $0.id < $1.id }.map { c in
            guard let name = self.appProtocol?.session.name else { return c }
            var c = c
            c.protocol = name
            c.subscriptions = held[c.id, default: 0]
            return c
        }
        return ClientsResult(seq: self.fanout.position.seq, clients: all)
    }

    /// How many of the protocol layer's subscriptions each app holds (on every connection).
    private var protocolSubscriptionsByApp: [AppID: Int] {
        var held: [AppID: Int] = [:]
        for layer in self.protocolLayers {
            for subscription in layer.session.liveSubscriptions {
                for holder in subscription.holders { held[holder.app, default: 0] += 1 }
            }
        }
        return held
    }
}
