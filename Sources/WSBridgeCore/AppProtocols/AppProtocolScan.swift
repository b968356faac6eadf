import CWSBridgeBytes
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
    /// An answer under `id` (a call's, or a subscription's event under the subscription's id);
    /// `final`: it ends what it answers.
    case answer(ScannedID, final: Bool, message: Range<Int>)
    /// A subscription's event under the server's id `server` (JSON-RPC's).
    case event(server: ScannedID, message: Range<Int>)
}

/// An id a scan found: where its text is in the bytes scanned, and how to read it. The `WireID` is
/// made from the bytes only when the session does not know them already (the same subscription's
/// events carry the same bytes, `AppProtocolSession.route(scanned:in:)`).
package struct ScannedID: Equatable, Sendable {
    /// The id's text in the bytes scanned.
    package var at: Range<Int>
    /// Plain text (a STOMP header's value, a NATS sid; checked for escapes by the scan), not JSON.
    package var plain: Bool

    package init(at: Range<Int>, plain: Bool) {
        self.at = at
        self.plain = plain
    }

    /// The id, read from `bytes` (the bytes scanned); nil when it is not one the scan may route
    /// (a JSON string with an escape, a JSON value that is not a number or a string): then the
    /// message is parsed.
    package func wireID(in bytes: UnsafeRawBufferPointer) -> WireID? {
        let text = UnsafeRawBufferPointer(rebasing: bytes[self.at])
        return self.plain ? WireID.scannedText(text) : WireID.scannedJSON(text)
    }
}

/// Where a scanned message goes (`AppProtocolSession.route(scanned:in:)`): the message's own bytes,
/// with the scanned id's text replaced by another id's where the app knows it by another.
package enum AppProtocolScannedRoute {
    /// To each holder under the id it knows (a subscription under the daemon's id).
    case holders([AppProtocolSessionHolder])
    /// To each holder under the one id `id` (nil: the message's own): a server-named subscription's.
    case shared([AppProtocolSessionHolder], id: WireID?)
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

    /// Where a scanned message goes when all it does is go to apps, and the id it carries
    /// (`bytes`: the bytes scanned), changed in the session as `fromUpstream` would change it (a
    /// call's final answer ends the call). nil when it does anything else (a subscribe's answer, a
    /// subscription's first event or last, an answer to nothing held) or its id is not one a scan
    /// routes: then it is parsed and goes through `fromUpstream`.
    ///
    /// A subscription's events come one after another with the same id's bytes: the last route
    /// that changes nothing in the session is kept with those bytes (`keptRoute`), and taken again
    /// while the session's ids and subscriptions have not changed (`routeVersion`), without
    /// reading the id again or looking it up: `.kept` with its number (each kept route has its
    /// own, from 1, so that the caller may keep what it found for it too).
    package mutating func route(scanned: AppProtocolScan, in bytes: UnsafeRawBufferPointer) -> AppProtocolRouted? {
        let scannedID: ScannedID
        let final: Bool
        switch scanned {
        case .unsure, .nothing, .broadcast: return nil
        case .answer(let id, let isFinal, _): (scannedID, final) = (id, isFinal)
        case .event(let id, _): (scannedID, final) = (id, false)
        }
        let event = if case .event = scanned { true } else { false }
        let text = UnsafeRawBufferPointer(rebasing: bytes[scannedID.at])
        // A call's answer, found by its id's number without reading the id (`AppProtocolCallTable`;
        // an id the session gave a call is no subscription's). The kept route stays: the change to
        // the calls made it stale (`routeVersion`).
        if !event, self.ids.callCount > 0, let call = self.ids.answer(scanned: text, plain: scannedID.plain, final: final) {
            return .call(call.app, call.appID)
        }
        if let serial = self.keptSerial(event: event, final: final, plain: scannedID.plain, text: text) { return .kept(serial) }
        guard let id = scannedID.wireID(in: bytes) else { return nil }
        // A call kept by its id (`AppProtocolCallTable`'s others): never a kept route, which only
        // a route that changes nothing may be.
        if !event, let call = self.ids.answer(id, final: final) {
            self.keptRoute = nil
            return .call(call.app, call.appID == id ? nil : call.appID)
        }
        guard let route = self.route(scanned: scanned, id: id) else { return nil }
        self.keptRoutes += 1
        self.keptRoute = AppProtocolKeptRoute(
            bytes: Array(text), event: event, final: final, plain: scannedID.plain, version: self.routeVersion, serial: self.keptRoutes, id: id,
            route: route)
        return .kept(self.keptRoutes)
    }

    /// The kept route's number, if it is the route of a message with these bytes at its id and of
    /// this kind. (Read in place, on its own: a copy of the kept route would copy its holders.)
    @inline(never)
    private func keptSerial(event: Bool, final: Bool, plain: Bool, text: UnsafeRawBufferPointer) -> UInt64? {
        self.keptRoute?.serial(version: self.routeVersion, event: event, final: final, plain: plain, text: text)
    }

    private func route(scanned: AppProtocolScan, id: WireID) -> AppProtocolScannedRoute? {
        switch scanned {
        case .unsure, .nothing: return nil
        case .broadcast: return .everyone
        case .answer(_, let final, _):
            guard let subscription = self.table[id] else { return self.codec.unknownAnswersBroadcast ? .everyone : nil }
            // A queue group's messages go in turn: parsed, never a kept route.
            guard subscription.worked, !subscription.stickyCall, subscription.turn == nil, !(final && self.codec.answersEndSubscriptions),
                !self.codec.namesSubscriptions
            else { return nil }
            return .holders(subscription.holders)
        case .event:
            let server = id
            guard let subscription = self.table.find(server: server), subscription.worked, subscription.turn == nil else { return nil }
            let visible = subscription.visibleID ?? server
            return .shared(subscription.holders, id: visible == server ? nil : visible)
        }
    }
}

/// What `AppProtocolSession.route(scanned:in:)` found: the session's kept route (`keptRoute`),
/// by its number, or a call's answer: to the app that made the call, under the id it knows the
/// call by when that is not the one the message carries (nil).
package enum AppProtocolRouted {
    case kept(UInt64)
    case call(AppID, WireID?)
}

/// A scanned route kept for the next message with the same id's bytes
/// (`AppProtocolSession.route(scanned:in:)`).
package struct AppProtocolKeptRoute {
    var bytes: [UInt8]
    var event: Bool
    var final: Bool
    var plain: Bool
    /// `AppProtocolSession.routeVersion` when it was found.
    var version: UInt64
    /// Its number among the session's kept routes.
    var serial: UInt64
    /// The id the message carries, and where it goes.
    package var id: WireID
    package var route: AppProtocolScannedRoute

    /// Its number, if it is the route of a message with these bytes at its id (`text`) and
    /// this kind, found at the session's `version`.
    func serial(version: UInt64, event: Bool, final: Bool, plain: Bool, text: UnsafeRawBufferPointer) -> UInt64? {
        guard self.version == version, self.event == event, self.final == final, self.plain == plain, self.bytes.count == text.count,
            text.has(self.bytes, at: 0)
        else { return nil }
        return self.serial
    }
}

extension WireID {
    /// The id whose JSON text is `bytes`: a number, or a string with no escape; nil for anything
    /// else (the message is parsed).
    package static func scannedJSON(_ bytes: UnsafeRawBufferPointer) -> WireID? {
        guard let first = bytes.first else { return nil }
        if first == UInt8(ascii: "\"") {
            guard bytes.count >= 2, bytes.last == UInt8(ascii: "\""), !bytes.contains(UInt8(ascii: "\\")) else { return nil }
            let inner = UnsafeRawBufferPointer(rebasing: bytes[1..<(bytes.count - 1)])
            // Bytes a JSON string holds as they are (the message's, valid UTF-8) are its
            // serialized text already.
            if cwsb_json_plain_prefix(inner.baseAddress, inner.count) == inner.count { return WireID(key: String(decoding: bytes, as: UTF8.self)) }
            return WireID(.string(String(decoding: inner, as: UTF8.self)))
        }
        return JSONNumber.scanned(bytes).map { WireID(key: $0.text) }
    }

    /// The id that is the plain text `bytes` (a STOMP header's value, a NATS sid; the caller
    /// checked it has no escape), decoded as the parse decodes it.
    static func scannedText(_ bytes: UnsafeRawBufferPointer) -> WireID? {
        guard !bytes.isEmpty else { return nil }
        return WireID(.string(String(decoding: bytes, as: UTF8.self)))
    }
}
