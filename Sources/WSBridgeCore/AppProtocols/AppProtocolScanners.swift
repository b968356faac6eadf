import WSBridgeProtocol

// Each protocol's scan of an upstream message (issue 46; `AppProtocolScan`): the id of a call's
// answer or a subscription's event found in the bytes, where `classify` would find it in the
// parsed view, and nothing claimed that the scan cannot be sure of. AppProtocolScanTests reads
// every scanned message both ways.

extension JSONProtocol {
    /// With no `[[protocol.reply]]` (whose filters need the message read).
    package var scansUpstream: Bool { self.replies.isEmpty }

    /// The id at `[protocol] id`: an answer (or a subscription's event) under it, final as
    /// `classify` says; no id, a broadcast.
    package func scan(upstream bytes: UnsafeRawBufferPointer) -> AppProtocolScan {
        guard self.replies.isEmpty else { return .unsure }
        switch JSONPathScan.scan(self.idScan, in: bytes) {
        case .unsure:
            return .unsure
        case .missing:
            return .broadcast(message: 0..<bytes.count)
        case .found(let range):
            return .answer(ScannedID(at: range, plain: false), final: true, message: 0..<bytes.count)
        }
    }
}

extension JSONRPC {
    package var scansUpstream: Bool { true }
    package var scanTellsBroadcasts: Bool { true }
    package var namesSubscriptions: Bool { true }

    /// A notification with `params.subscription` (an event under the server's id), or an answer
    /// (`id`, no `method`, a `result` or an `error`); anything else a broadcast, as `classify`
    /// says. The message's members are walked once.
    package func scan(upstream bytes: UnsafeRawBufferPointer) -> AppProtocolScan {
        var id: Range<Int>?
        var method = false
        var outcome = false
        var params: Range<Int>?
        func named(_ name: UnsafeRawBufferPointer, _ word: StaticString) -> Bool { name.count == word.utf8CodeUnitCount && name.has(word, at: 0) }
        let walked = JSONPathScan.members(in: bytes) { name, value in
            // The first of a name twice (a parse keeps the last: RFC 8259 leaves it to the reader).
            // By the first letter, then the name (one compare at most).
            switch name.first {
            case UInt8(ascii: "i") where id == nil && named(name, "id"): id = value
            case UInt8(ascii: "m") where named(name, "method"): method = true
            case UInt8(ascii: "r") where named(name, "result"): outcome = true
            case UInt8(ascii: "p") where params == nil && named(name, "params"): params = value
            case UInt8(ascii: "e") where named(name, "error"): outcome = true
            default: break
            }
            return false
        }
        guard walked else { return .unsure }
        let all = 0..<bytes.count
        if let id, !method, outcome, !(id.count == 4 && bytes.has("null", at: id.lowerBound)) {
            return .answer(ScannedID(at: id, plain: false), final: true, message: all)
        }
        // `params` not an object has no `subscription`.
        guard id == nil, method, let params, bytes[params.lowerBound] == UInt8(ascii: "{") else { return .broadcast(message: all) }
        // Its members up to `subscription` (most often the first).
        var subscription: Range<Int>?
        let inner = UnsafeRawBufferPointer(rebasing: bytes[params])
        let walkedParams = JSONPathScan.members(in: inner) { name, value in
            guard name.count == 12, name.has("subscription", at: 0) else { return false }
            subscription = value
            return true
        }
        guard walkedParams else { return .unsure }
        guard let at = subscription else { return .broadcast(message: all) }
        return .event(server: ScannedID(at: (params.lowerBound + at.lowerBound)..<(params.lowerBound + at.upperBound), plain: false), message: all)
    }
}

extension GraphQLTransportWS {
    package var scansUpstream: Bool { true }

    /// A `next` (a subscription's event, or a query's answer) under its `id`: the message's
    /// members walked up to its `type` and its `id` (the first of each).
    package func scan(upstream bytes: UnsafeRawBufferPointer) -> AppProtocolScan {
        var type: Range<Int>?
        var id: Range<Int>?
        let walked = JSONPathScan.members(in: bytes) { name, value in
            if type == nil, name.count == 4, name.has("type", at: 0) {
                type = value
            } else if id == nil, name.count == 2, name.has("id", at: 0) {
                id = value
            }
            return type != nil && id != nil
        }
        guard walked, let type, let id, type.count == 6, bytes.has(#""next""#, at: type.lowerBound) else { return .unsure }
        return .answer(ScannedID(at: id, plain: false), final: false, message: 0..<bytes.count)
    }
}

extension SocketIO {
    package var scansUpstream: Bool { true }

    /// An ack in the default namespace, `43<id>[…]`: the answer to the call with that id.
    package func scan(upstream bytes: UnsafeRawBufferPointer) -> AppProtocolScan {
        guard bytes.count > 3, bytes[0] == UInt8(ascii: "4"), bytes[1] == UInt8(ascii: "3") else { return .unsure }
        var k = 2
        var id: UInt64 = 0
        while k < bytes.count, bytes[k] >= UInt8(ascii: "0"), bytes[k] <= UInt8(ascii: "9") {
            // Up to 19 digits (no overflow), no leading zero (the id's text is its value's).
            guard k < 21, k == 2 || id != 0 else { return .unsure }
            id = id * 10 + UInt64(bytes[k] - UInt8(ascii: "0"))
            k += 1
        }
        guard k > 2, k < bytes.count, bytes[k] == UInt8(ascii: "[") else { return .unsure }
        return .answer(ScannedID(at: 2..<k, plain: false), final: true, message: 0..<bytes.count)
    }
}

extension STOMP {
    package var scansUpstream: Bool { true }

    /// A `MESSAGE` frame (after any heart-beats) with one `subscription` header and no escaped
    /// header: an event of that subscription. The frame ends at its NUL (after `content-length` bytes when
    /// it gives them).
    package func scan(upstream bytes: UnsafeRawBufferPointer) -> AppProtocolScan {
        let n = bytes.count
        let nl = UInt8(ascii: "\n")
        let cr = UInt8(ascii: "\r")
        var i = 0
        while i < n, bytes[i] == nl || (bytes[i] == cr && i + 1 < n && bytes[i + 1] == nl) { i += 1 }
        if i == n { return .nothing(end: n) }
        let start = i
        guard bytes.has("MESSAGE", at: i) else { return .unsure }
        i += 7
        if i < n, bytes[i] == cr { i += 1 }
        guard i < n, bytes[i] == nl else { return .unsure }
        i += 1
        var subscription: Range<Int>?
        var length: Int?
        // Header lines up to the blank one.
        let headers = i
        while true {
            guard let end = bytes.index(of: nl, from: i) else { return .unsure }
            let lineEnd = end > i && bytes[end - 1] == cr ? end - 1 : end
            if lineEnd == i {
                i = end + 1
                break
            }
            // A header is name:value (the two read here have their colon).
            if lineEnd - i >= 13, bytes[i] == UInt8(ascii: "s"), bytes.has("subscription:", at: i) {
                // A second one: the view keeps the last; leave it to the parse.
                guard subscription == nil else { return .unsure }
                subscription = (i + 13)..<lineEnd
            } else if length == nil, lineEnd - i >= 15, bytes[i] == UInt8(ascii: "c"), bytes.has("content-length:", at: i) {
                guard let value = bytes.decimal((i + 15)..<lineEnd) else { return .unsure }
                length = value
            } else {
                guard bytes.index(of: UInt8(ascii: ":"), from: i, to: lineEnd) != nil else { return .unsure }
            }
            i = end + 1
        }
        // A header with an escape (in its name or value) is the parse's: one look for all.
        guard let at = subscription, !at.isEmpty, bytes.index(of: UInt8(ascii: "\\"), from: headers, to: i) == nil else { return .unsure }
        let nul: Int
        if let length {
            guard i + length < n, bytes[i + length] == 0 else { return .unsure }
            nul = i + length
        } else {
            guard let found = bytes.index(of: 0, from: i) else { return .unsure }
            nul = found
        }
        return .answer(ScannedID(at: at, plain: true), final: false, message: start..<(nul + 1))
    }

    /// A header value as the wire carries it (escaped as STOMP 1.2 escapes a MESSAGE's).
    package func scannedIDText(_ id: WireID) -> String { Self.escape(id.json.stringValue ?? id.key) }
}

extension NATS {
    package var scansUpstream: Bool { true }

    /// `MSG <subject> <sid> [reply] <size>␍␊<payload>␍␊` (or `HMSG` with its header size) on a
    /// subscription's sid, not the daemon's inbox: an event of that subscription.
    package func scan(upstream bytes: UnsafeRawBufferPointer) -> AppProtocolScan {
        let n = bytes.count
        let headed: Bool
        if bytes.has("MSG ", at: 0) {
            headed = false
        } else if bytes.has("HMSG ", at: 0) {
            headed = true
        } else {
            return .unsure
        }
        guard let lf = bytes.index(of: UInt8(ascii: "\n"), from: 0), lf > 0, bytes[lf - 1] == UInt8(ascii: "\r") else { return .unsure }
        // The words after the operation: subject, sid, [reply], [header size], size.
        // Subject and sid kept; the last two (sizes) as they go by.
        var subjectWord = 0..<0
        var sidWord = 0..<0
        var (before, last) = (0..<0, 0..<0)
        var count = 0
        var k = headed ? 5 : 4
        while k < lf - 1 {
            let b = bytes[k]
            if b == 0x20 || b == 0x09 {
                k += 1
                continue
            }
            let start = k
            while k < lf - 1, bytes[k] != 0x20, bytes[k] != 0x09 { k += 1 }
            guard count < 5 else { return .unsure }
            if count == 0 { subjectWord = start..<k }
            if count == 1 { sidWord = start..<k }
            (before, last) = (last, start..<k)
            count += 1
        }
        let fixed = headed ? 4 : 3
        guard count == fixed || count == fixed + 1 else { return .unsure }
        guard let size = bytes.decimal(last) else { return .unsure }
        if headed {
            guard let headers = bytes.decimal(before), headers <= size else { return .unsure }
        }
        let end = lf + 1 + size + 2
        guard end <= n, bytes[end - 2] == UInt8(ascii: "\r"), bytes[end - 1] == UInt8(ascii: "\n") else { return .unsure }
        // A reply to one of the daemon's calls comes to its inbox: the parse routes it.
        if subjectWord.count >= self.inboxBytes.count, bytes.has(self.inboxBytes, at: subjectWord.lowerBound) { return .unsure }
        guard !sidWord.isEmpty, !(sidWord.count == Self.inboxSIDBytes.count && bytes.has(Self.inboxSIDBytes, at: sidWord.lowerBound)) else { return .unsure }
        return .answer(ScannedID(at: sidWord, plain: true), final: false, message: 0..<end)
    }

    static let inboxSIDBytes = Array(Self.inboxSID.utf8)

    /// A sid as it is.
    package func scannedIDText(_ id: WireID) -> String { id.json.stringValue ?? id.key }
}
