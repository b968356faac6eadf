import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// An upstream message routed by a scan (issue 46): a call's answer or a subscription's event
/// found by the codec in the message's bytes (`AppProtocolCodec.scan(upstream:)`), where it goes
/// by one lookup in the session (`route(scanned:in:)`, or the route kept for the same id's
/// bytes), and the message passed on as its bytes, the id's bytes written as the one its app
/// knows where that is another (`IDSplice`). Nothing is parsed unless something
/// needs the message's view (a filter, `inline_json`, a `request` waiting, a `tail --all`, a
/// JSON-RPC batch waiting for its answers), or the scan cannot tell.
extension AppProtocolLayer {
    /// Routes the protocol messages at the start of `message` that a scan can tell (a text
    /// protocol's WebSocket message may carry several): the bytes they took, up to the first it
    /// cannot (0: none; the rest is parsed).
    func routeByScan(_ message: UpstreamMessage) -> Int {
        guard self.scans, !self.requests.hasByID, !self.fanout.needsView, !self.fanout.hasWireTaps, self.batches.isEmpty else { return 0 }
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
                guard let routed else { return offset }
                let data = offset == 0 && range.count == total ? message.data : Self.slice(message.data, offset + range.lowerBound, range.count)
                let idAt = (scannedID.at.lowerBound - range.lowerBound)..<(scannedID.at.upperBound - range.lowerBound)
                let time = message.receivedAtMillis
                switch routed {
                case .kept(let kept):
                    if let holder = self.keptHolder, holder.route == kept, holder.clients == self.fanout.clientsVersion {
                        // The subscription's next message for its one holder: no lookup.
                        self.fanout.deliver(
                            nil, data: data, splicing: holder.text.map { IDSplice(at: idAt, text: $0) }, to: holder.client, receivedAtMillis: time)
                    } else if let route = self.session.keptRoute {
                        self.deliver(route.route, scanned: route.id, kept: kept, at: idAt, data: data, receivedAtMillis: time)
                    }
                case .call(let app, let appID):
                    self.deliver(data, at: idAt, as: appID.map { self.spelling($0) }, to: app, receivedAtMillis: time)
                }
                offset += range.upperBound
            }
        }
        return offset
    }

    /// The message `data` (its id at `at`, `id`) to where `route` sends it, written with the id
    /// each app knows it by.
    private func deliver(_ route: AppProtocolScannedRoute, scanned id: WireID, kept: UInt64, at: Range<Int>, data: ByteBuffer, receivedAtMillis time: Int64) {
        switch route {
        case .everyone:
            self.fanout.publish(UpstreamMessage(kind: .text, data: data, receivedAtMillis: time))
        case .shared(let holders, let visible):
            if holders.count > 1, self.deliverInRun(holders, data: data, idAt: at, receivedAtMillis: time, id: { _ in visible }) { return }
            let text = visible.map { self.spelling($0) }
            let seq = holders.count > 1 ? self.fanout.takeRoutedSeq() : nil
            for holder in holders {
                self.deliver(data, at: at, as: text, to: holder.app, receivedAtMillis: time, seq: seq, kept: holders.count == 1 ? kept : 0)
            }
        case .holders(let holders):
            if holders.count > 1, self.deliverInRun(holders, data: data, idAt: at, receivedAtMillis: time, id: { $0.appID == id ? nil : $0.appID }) {
                return
            }
            // One message, one seq for all its holders.
            let seq = holders.count > 1 ? self.fanout.takeRoutedSeq() : nil
            for holder in holders {
                let text = holder.appID == id ? nil : self.spelling(holder.appID)
                self.deliver(data, at: at, as: text, to: holder.app, receivedAtMillis: time, seq: seq, kept: holders.count == 1 ? kept : 0)
            }
        }
    }

    /// A message for several holders as a line of the fan-out's run (`Fanout.deliverInRun`).
    private func deliverInRun(
        _ holders: [AppProtocolSessionHolder], data: ByteBuffer, idAt: Range<Int>, receivedAtMillis: Int64,
        id: (AppProtocolSessionHolder) -> WireID?
    ) -> Bool {
        self.fanout.deliverInRun(holders, data: data, idAt: idAt, receivedAtMillis: receivedAtMillis, id: id, spelling: { self.spelling($0) })
    }

    /// To `app`'s client (under `seq`, one message's for all its holders, or a new one), as a
    /// frame to an app on the WebSocket face, or into the stream for a fleet follower's app; the bytes at `at` written as `text` (nil: as they
    /// are). `kept`: the session's kept route this is its one holder of (0: none), whose client
    /// is kept for its next messages.
    private func deliver(_ data: ByteBuffer, at: Range<Int>, as text: ByteBuffer?, to app: AppID, receivedAtMillis: Int64, seq: UInt64? = nil, kept: UInt64 = 0)
    {
        if let client = self.client(app) {
            if kept != 0 { self.keptHolder = KeptHolder(route: kept, clients: self.fanout.clientsVersion, client: client, text: text) }
            self.fanout.deliver(nil, data: data, splicing: text.map { IDSplice(at: at, text: $0) }, to: client, receivedAtMillis: receivedAtMillis, shared: seq)
        } else {
            let bytes = text.map { self.replacing(at, in: data, with: $0) } ?? data
            if !self.fanout.deliverToWebSocketApp(app, data: bytes) {
                _ = self.fanout.deliverToFollower(app, data: bytes, receivedAtMillis: receivedAtMillis)
            }
        }
    }

    /// `app`'s client: the last one found is kept while no client came or left (a call's
    /// answers go to the same few apps one after another).
    private func client(_ app: AppID) -> LocalClient? {
        if let last = self.lastClient, last.app == app, last.clients == self.fanout.clientsVersion { return last.client }
        guard let client = self.fanout.client(app) else { return nil }
        self.lastClient = (app, self.fanout.clientsVersion, client)
        return client
    }

    private static func slice(_ data: ByteBuffer, _ start: Int, _ count: Int) -> ByteBuffer {
        data.getSlice(at: data.readerIndex + start, length: count)!
    }

    /// `data` with the bytes at `range` (of its readable bytes) replaced by `text` (a fleet
    /// follower's app's message goes into the stream as its own bytes).
    private func replacing(_ range: Range<Int>, in data: ByteBuffer, with text: ByteBuffer) -> ByteBuffer {
        var out = self.allocator.buffer(capacity: data.readableBytes - range.count + text.readableBytes)
        out.writeImmutableBuffer(data.getSlice(at: data.readerIndex, length: range.lowerBound)!)
        out.writeImmutableBuffer(text)
        out.writeImmutableBuffer(data.getSlice(at: data.readerIndex + range.upperBound, length: data.readableBytes - range.upperBound)!)
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

/// The client of the session's kept route's one holder (`AppProtocolSession.route(scanned:in:)`)
/// and the id's text its app knows (nil: the wire's): the route's next messages go to it without
/// a lookup, while the route is the same one (`route`, its number) and no client came or left
/// (`clients`, `Fanout.clientsVersion`).
struct KeptHolder {
    var route: UInt64
    var clients: UInt64
    var client: LocalClient
    var text: ByteBuffer?
}
