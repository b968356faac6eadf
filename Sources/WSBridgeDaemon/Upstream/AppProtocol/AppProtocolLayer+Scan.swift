import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// A subscription's event routed by a scan (issue 46): its id found in its bytes at the codec's
/// `idScanPath`, its holders by one lookup, and the message passed on as its bytes, or with the
/// id's bytes replaced by a holder's own. Nothing is parsed unless something needs the message's
/// view (a filter, `inline_json`, a `request` waiting, a `tail --all`), or the scan cannot tell.
extension AppProtocolLayer {
    /// Whether the message went to everyone (true) or to its holders (false); nil when it must
    /// be parsed and go the whole way.
    func routeByScan(_ message: UpstreamMessage) -> Bool? {
        guard let path = self.idScanPath, self.requests.isEmpty, !self.fanout.needsView, !self.fanout.hasWireTaps else { return nil }
        let scanned: (range: Range<Int>, id: WireID)?? = message.data.withUnsafeReadableBytes { bytes in
            switch JSONPathScan.scan(path, in: bytes) {
            case .unsure:
                return nil
            case .missing:
                return .some(nil)
            case .found(let range):
                guard let id = Self.wireID(UnsafeRawBufferPointer(rebasing: bytes[range])) else { return nil }
                return (range, id)
            }
        }
        guard let scanned else { return nil }
        // No id: a broadcast, as `classify` says of it (the codec has no reply filters).
        guard let (range, id) = scanned else { return true }
        guard let holders = self.session.holders(routedBy: id) else { return nil }
        // A holder that is no local client here (a fleet follower's app): the whole way.
        let clients = holders.compactMap { self.fanout.client($0.app) }
        guard clients.count == holders.count else { return nil }
        for (holder, client) in zip(holders, clients) {
            let data = holder.id == id ? message.data : Self.replacing(range, in: message.data, with: holder.id)
            self.fanout.deliver(nil, data: data, to: client, receivedAtMillis: message.receivedAtMillis)
        }
        return false
    }

    /// The id at a scanned value: a number, or a string with no escape; nil for anything else.
    private static func wireID(_ bytes: UnsafeRawBufferPointer) -> WireID? {
        guard let first = bytes.first else { return nil }
        if first == UInt8(ascii: "\"") {
            guard bytes.count >= 2, bytes.last == UInt8(ascii: "\""), !bytes.contains(UInt8(ascii: "\\")) else { return nil }
            return WireID(.string(String(decoding: UnsafeRawBufferPointer(rebasing: bytes[1..<(bytes.count - 1)]), as: UTF8.self)))
        }
        return JSONNumber.scanned(bytes).map { WireID(.number($0)) }
    }

    /// `data` with the bytes at `range` (of its readable bytes) replaced by `id`'s JSON text.
    private static func replacing(_ range: Range<Int>, in data: ByteBuffer, with id: WireID) -> ByteBuffer {
        let text = id.json.serialized
        var out = ByteBuffer()
        out.reserveCapacity(data.readableBytes - range.count + text.utf8.count)
        out.writeBytes(data.readableBytesView[data.readerIndex..<(data.readerIndex + range.lowerBound)])
        out.writeString(text)
        out.writeBytes(data.readableBytesView[(data.readerIndex + range.upperBound)...])
        return out
    }
}
