import WSBridgeProtocol

extension LocalPlane {
    /// The `status` reply: the link's own snapshot (the one source of truth for link state) and
    /// the fan-out's counters.
    func statusReport() -> StatusReport {
        let s = self.link.status
        return StatusReport(
            state: s.phase,
            since: s.sinceMillis,
            url: s.url,
            reconnects: s.reconnects,
            failedAttempts: s.failures,
            rttMillis: s.rttMillis,
            subprotocol: s.subprotocol,
            compression: s.compression,
            messagesIn: s.messagesIn,
            bytesIn: s.bytesIn,
            messagesOut: s.messagesOut,
            bytesOut: s.bytesOut,
            subscribers: self.fanout.subscriberCount,
            clients: self.fanout.clientCount,
            seq: self.fanout.seq,
            drops: self.fanout.drops,
            queue: .init(messages: s.queuedMessages, bytes: s.queuedBytes, maxMessages: s.queueMaxMessages, maxBytes: s.queueMaxBytes),
            lastError: s.lastError,
            lastClose: s.lastClose.map { StatusReport.Close(code: $0.code, reason: $0.reason, by: $0.by) },
            retryInMillis: s.retryInMillis
        )
    }
}
