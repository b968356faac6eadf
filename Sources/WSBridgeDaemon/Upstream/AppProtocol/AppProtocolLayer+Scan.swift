import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// An upstream message routed by a scan (issue 46): a call's answer or a subscription's event
/// found by the codec in the message's bytes (`AppProtocolCodec.scan(upstream:)`), where it goes
/// by one lookup in the session (`route(scanned:)`), and the message passed on as its bytes, or
/// with the id's bytes replaced by the one its app knows. Nothing is parsed unless something
/// needs the message's view (a filter, `inline_json`, a `request` waiting, a `tail --all`), or
/// the scan cannot tell.
extension AppProtocolLayer {
    /// Routes the protocol messages at the start of `message` that a scan can tell (a text
    /// protocol's WebSocket message may carry several): the bytes they took, up to the first it
    /// cannot (0: none; the rest is parsed).
    func routeByScan(_ message: UpstreamMessage) -> Int {
        guard self.scans, self.requests.isEmpty, !self.fanout.needsView, !self.fanout.hasWireTaps else { return 0 }
        let total = message.data.readableBytes
        var offset = 0
        while offset < total {
            let (scanned, routed) = message.data.withUnsafeReadableBytes { bytes in
                let rest = UnsafeRawBufferPointer(rebasing: bytes[offset...])
                let scanned = self.session.scan(upstream: rest)
                return (scanned, self.session.route(scanned: scanned, in: rest))
            }
            switch scanned {
            case .unsure:
                return offset
            case .nothing(let end):
                offset += end
            case .broadcast(let range):
                let data = offset == 0 && range.count == total ? message.data : Self.slice(message.data, offset + range.lowerBound, range.count)
                self.fanout.publish(UpstreamMessage(kind: .text, data: data, receivedAtMillis: message.receivedAtMillis))
                offset += range.upperBound
            case .answer(let scannedID, _, let range), .event(let scannedID, let range):
                guard let (id, route) = routed else { return offset }
                self.deliver(route, scanned: id, at: scannedID.at, range: range, offset: offset, of: message)
                offset += range.upperBound
            }
        }
        return offset
    }

    /// The message at `range` (from `offset`) to where `route` sends it, the id at `at` (`id`)
    /// replaced for each app that knows it by another.
    private func deliver(
        _ route: AppProtocolScannedRoute, scanned id: WireID, at: Range<Int>, range: Range<Int>, offset: Int, of message: UpstreamMessage
    ) {
        let data = offset == 0 && range.count == message.data.readableBytes ? message.data : Self.slice(message.data, offset + range.lowerBound, range.count)
        let idAt = (at.lowerBound - range.lowerBound)..<(at.upperBound - range.lowerBound)
        let time = message.receivedAtMillis
        switch route {
        case .everyone:
            self.fanout.publish(UpstreamMessage(kind: .text, data: data, receivedAtMillis: time))
        case .call(let app, let appID):
            self.deliver(appID == id ? data : self.replacing(idAt, in: data, with: appID), to: app, receivedAtMillis: time)
        case .shared(let holders, let visible):
            if holders.count > 1, self.deliverInRun(holders, data: data, idAt: idAt, receivedAtMillis: time, id: { _ in visible }) { return }
            let shared = visible.map { self.replacing(idAt, in: data, with: $0) } ?? data
            let seq = holders.count > 1 ? self.fanout.takeRoutedSeq() : nil
            for holder in holders { self.deliver(shared, to: holder.app, receivedAtMillis: time, seq: seq) }
        case .holders(let holders):
            if holders.count > 1, self.deliverInRun(holders, data: data, idAt: idAt, receivedAtMillis: time, id: { $0.appID == id ? nil : $0.appID }) {
                return
            }
            // One message, one seq for all its holders.
            let seq = holders.count > 1 ? self.fanout.takeRoutedSeq() : nil
            for holder in holders {
                let bytes = holder.appID == id ? data : self.replacing(idAt, in: data, with: holder.appID)
                self.deliver(bytes, to: holder.app, receivedAtMillis: time, seq: seq)
            }
        }
    }

    /// A message for several holders as a line of the fan-out's run (`RoutedRun`): written once
    /// for each id its holders know it by (`id`: nil for the message's own), the run's batch
    /// going to each of them once it ends. False when they cannot share one (a fleet follower's
    /// app among them, or one app twice): then each is sent its own.
    private func deliverInRun(
        _ holders: [AppProtocolSessionHolder], data: ByteBuffer, idAt: Range<Int>, receivedAtMillis: Int64,
        id: (AppProtocolSessionHolder) -> WireID?
    ) -> Bool {
        guard let seq = self.fanout.continueRun(for: holders) ?? self.fanout.openRun(for: holders, id: id) else { return false }
        for i in self.fanout.run.variants.indices {
            let bytes = self.fanout.run.variants[i].id.map { self.replacing(idAt, in: data, with: $0) } ?? data
            self.fanout.writeRunLine(i, seq: seq, data: bytes, receivedAtMillis: receivedAtMillis)
        }
        self.fanout.runLineWritten()
        return true
    }

    /// To `app`'s client (under `seq`, one message's for all its holders, or a new one), or into
    /// the stream for a fleet follower's app.
    private func deliver(_ data: ByteBuffer, to app: AppID, receivedAtMillis: Int64, seq: UInt64? = nil) {
        if let client = self.fanout.client(app) {
            self.fanout.deliver(nil, data: data, to: client, receivedAtMillis: receivedAtMillis, shared: seq)
        } else {
            _ = self.fanout.deliverToFollower(app, data: data, receivedAtMillis: receivedAtMillis)
        }
    }

    private static func slice(_ data: ByteBuffer, _ start: Int, _ count: Int) -> ByteBuffer {
        data.getSlice(at: data.readerIndex + start, length: count)!
    }

    /// `data` with the bytes at `range` (of its readable bytes) replaced by `id` as the wire
    /// carries it there.
    private func replacing(_ range: Range<Int>, in data: ByteBuffer, with id: WireID) -> ByteBuffer {
        let text = self.spelling(id)
        var out = self.fanout.allocator.buffer(capacity: data.readableBytes - range.count + text.readableBytes)
        out.writeBytes(data.readableBytesView[data.readerIndex..<(data.readerIndex + range.lowerBound)])
        out.writeImmutableBuffer(text)
        out.writeBytes(data.readableBytesView[(data.readerIndex + range.upperBound)...])
        return out
    }

    /// `id` as the wire carries it in place of the scanned one: kept for the last few ids (the
    /// same ones come back for every message of a subscription).
    private func spelling(_ id: WireID) -> ByteBuffer {
        if let kept = self.spellings.first(where: { $0.id == id }) { return kept.text }
        let text = ByteBuffer(string: self.codec.scannedIDText(id))
        if self.spellings.count == Self.keptSpellings { self.spellings.removeFirst() }
        self.spellings.append((id, text))
        return text
    }

    private static var keptSpellings: Int { 8 }
}
