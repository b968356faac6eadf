import WSBridgeProtocol

/// An upstream message read by a scan of its bytes instead of a parse (issue 46): what a codec's
/// `scan(upstream:)` tells of the protocol message at the start of the bytes. Ranges are offsets
/// in the bytes scanned. A scan says only what `classify` would say of the parsed message, or
/// `unsure`.
package enum AppProtocolScan: Equatable, Sendable {
    /// The scan cannot tell, or the message does more than go to apps: parse it.
    case unsure
    /// Nothing but what separates messages (STOMP's heart-beats) up to `end`.
    case nothing(end: Int)
    /// A message with no id, which `classify` says goes to everyone (json's without one).
    case broadcast(message: Range<Int>)
    /// An answer under `id` (a call's, or a subscription's event under the subscription's id),
    /// the id's text at `at`; `final`: it ends what it answers.
    case answer(WireID, at: Range<Int>, final: Bool, message: Range<Int>)
    /// A subscription's event under the server's id `server` (JSON-RPC's), its text at `at`.
    case event(server: WireID, at: Range<Int>, message: Range<Int>)
}

/// Where a scanned message goes (`AppProtocolSession.route(scanned:)`): the message's own bytes,
/// with the scanned id's text replaced by another id's where the app knows it by another.
package enum AppProtocolScannedRoute {
    /// To each holder under the id it knows (a subscription under the daemon's id).
    case holders([AppProtocolSessionHolder])
    /// To each holder under the one id `id` (nil: the message's own): a server-named subscription's.
    case shared([AppProtocolSessionHolder], id: WireID?)
    /// To the app that made the call, under its id.
    case call(AppID, WireID)
    /// To every subscriber (json: an id nobody holds is data).
    case everyone
}

extension AppProtocolSession {
    /// The protocol message at the start of `bytes`, scanned (text protocols: `unsure` while a
    /// message an earlier WebSocket message cut is pending). (Mutating though it changes
    /// nothing: called on the layer's session in place, not on a copy of it.)
    package mutating func scan(upstream bytes: UnsafeRawBufferPointer) -> AppProtocolScan {
        guard self.partial.isEmpty else { return .unsure }
        return self.codec.scan(upstream: bytes)
    }

    /// Text protocols: whether a message an earlier WebSocket message cut is pending (what comes
    /// next is its rest, not a message's start). (Mutating though it changes nothing: called on
    /// the layer's session in place, not on a copy of it.)
    package mutating func hasPartialText() -> Bool { !self.partial.isEmpty }

    /// Where a scanned message goes when all it does is go to apps, changed in the session as
    /// `fromUpstream` would change it (a call's final answer ends the call). nil when it does
    /// anything else (a subscribe's answer, a subscription's first event or last, an answer to
    /// nothing held): then it is parsed and goes through `fromUpstream`.
    package mutating func route(scanned: AppProtocolScan) -> AppProtocolScannedRoute? {
        switch scanned {
        case .unsure, .nothing: return nil
        case .broadcast: return .everyone
        case .answer(let id, _, let final, _):
            if let call = self.ids.call(id) {
                if final { self.ids.endCall(id) }
                return .call(call.app, call.appID)
            }
            guard let subscription = self.table[id] else { return self.codec.unknownAnswersBroadcast ? .everyone : nil }
            guard subscription.worked, !subscription.stickyCall, !(final && self.codec.answersEndSubscriptions), !self.codec.namesSubscriptions
            else { return nil }
            return .holders(subscription.holders)
        case .event(let server, _, _):
            guard let subscription = self.table.find(server: server), subscription.worked else { return nil }
            let visible = subscription.visibleID ?? server
            return .shared(subscription.holders, id: visible == server ? nil : visible)
        }
    }
}

extension WireID {
    /// The id whose JSON text is `bytes`: a number, or a string with no escape; nil for anything
    /// else (the message is parsed).
    package static func scannedJSON(_ bytes: UnsafeRawBufferPointer) -> WireID? {
        guard let first = bytes.first else { return nil }
        if first == UInt8(ascii: "\"") {
            guard bytes.count >= 2, bytes.last == UInt8(ascii: "\""), !bytes.contains(UInt8(ascii: "\\")) else { return nil }
            return WireID(.string(String(decoding: UnsafeRawBufferPointer(rebasing: bytes[1..<(bytes.count - 1)]), as: UTF8.self)))
        }
        return JSONNumber.scanned(bytes).map { WireID(.number($0)) }
    }

    /// The id that is the plain text `bytes` (a STOMP header's value, a NATS sid; the caller
    /// checked it has no escape), decoded as the parse decodes it.
    static func scannedText(_ bytes: UnsafeRawBufferPointer) -> WireID? {
        guard !bytes.isEmpty else { return nil }
        return WireID(.string(String(decoding: bytes, as: UTF8.self)))
    }
}

extension JSONPathScan {
    /// The value's range at `path` in `bytes` when it is there (nil: missing, or unsure).
    static func range(_ path: Path, in bytes: UnsafeRawBufferPointer) -> Range<Int>? {
        if case .found(let range) = Self.scan(path, in: bytes) { return range }
        return nil
    }

    /// Whether `bytes` has no value at `path` (false: it has, or the scan cannot tell).
    static func lacks(_ path: Path, in bytes: UnsafeRawBufferPointer) -> Bool { Self.scan(path, in: bytes) == .missing }
}
