import WSBridgeProtocol

/// STOMP 1.2 over WebSocket. A frame is its command line, `name:value` header lines, a blank
/// line and the body up to a NUL (or `content-length` bytes, then the NUL); several frames may
/// share a WebSocket message and one may span several; a lone end of line between frames is a
/// heart-beat. The daemon's `CONNECT` is an opening message and `CONNECTED` the ready gate;
/// heart-beats go both ways as negotiated. `SUBSCRIBE` ids are rewritten per app (identical
/// destinations and headers go upstream once) and `MESSAGE`s routed by their `subscription`;
/// a frame's `receipt` is a call answered by its `RECEIPT`.
///
/// The view: `{"command":"MESSAGE","headers":{"destination":…,…},"body":…}`, the body inlined
/// when it is a JSON object or array, else a string.
package struct STOMP: AppProtocolCodec {
    /// `[protocol] heart_beat`: what the daemon offers (milliseconds: it sends every, it wants every).
    package var heartBeat: (send: Int, receive: Int)

    package init(settings: Configuration.ApplicationProtocol) {
        let beat = settings.heartBeat ?? .init(send: 10_000, receive: 10_000)
        self.init(heartBeat: (beat.send, beat.receive))
    }

    /// CONNECT (with `[protocol]` host, login, passcode and heart_beat) opens it; CONNECTED is
    /// the gate; the subprotocol is STOMP 1.2's.
    package static func connection(_ settings: Configuration.ApplicationProtocol) -> AppProtocolConnection {
        var frame = "CONNECT\naccept-version:1.2\nhost:\(settings.host ?? "/")\n"
        if let login = settings.login { frame += "login:\(login)\n" }
        if let passcode = settings.passcode { frame += "passcode:\(passcode)\n" }
        let beat = settings.heartBeat ?? .init(send: 10_000, receive: 10_000)
        frame += "heart-beat:\(beat.send),\(beat.receive)\n\n\0"
        return AppProtocolConnection(opening: frame, readyWhen: Filter(.prefix("CONNECTED")), subprotocol: "v12.stomp")
    }

    package init(heartBeat: (send: Int, receive: Int) = (10_000, 10_000)) {
        self.heartBeat = heartBeat
    }

    package var name: String { "stomp" }
    package var isText: Bool { true }

    package func wireID(_ n: UInt64) -> WireID { WireID(.string(String(n))) }

    // MARK: - Frames

    package func split(_ bytes: ArraySlice<UInt8>) -> Result<(messages: [AppProtocolMessage], consumed: Int), AppProtocolSyntaxError> {
        var messages: [AppProtocolMessage] = []
        var i = bytes.startIndex
        let nl = UInt8(ascii: "\n")
        let cr = UInt8(ascii: "\r")
        while true {
            // Heart-beats between frames.
            while i < bytes.endIndex, bytes[i] == nl || (bytes[i] == cr && i + 1 < bytes.endIndex && bytes[i + 1] == nl) { i += 1 }
            guard i < bytes.endIndex else { break }
            if bytes[i] == cr { break }  // "\r" at the end: its "\n" is still to come
            let start = i
            guard let commandEnd = bytes[i...].firstIndex(of: nl) else { break }
            let command = Self.line(bytes[i..<commandEnd])
            guard !command.isEmpty, command.utf8.allSatisfy({ $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") }) else {
                return .failure(
                    AppProtocolSyntaxError("a STOMP frame starts with its command in capitals (SEND, SUBSCRIBE…), not \(command.prefix(40).debugDescription)"))
            }
            let escaped = command != "CONNECT" && command != "CONNECTED"
            var headers: [(String, JSONValue)] = []
            var j = commandEnd + 1
            var complete = false
            var length: Int?
            while let end = bytes[j...].firstIndex(of: nl) {
                let line = Self.line(bytes[j..<end])
                j = end + 1
                if line.isEmpty {
                    complete = true
                    break
                }
                guard let colon = line.utf8.firstIndex(of: UInt8(ascii: ":")) else {
                    return .failure(AppProtocolSyntaxError("a STOMP header is name:value, not \(line.prefix(40).debugDescription)"))
                }
                let name = escaped ? Self.unescape(line[..<colon]) : String(line[..<colon])
                let value = escaped ? Self.unescape(line[line.index(after: colon)...]) : String(line[line.index(after: colon)...])
                if name == "content-length", length == nil {
                    guard let n = Int(value), n >= 0 else {
                        return .failure(AppProtocolSyntaxError("content-length is a count of bytes, not \(value.debugDescription)"))
                    }
                    length = n
                }
                headers.append((name, .string(value)))
            }
            guard complete else { break }
            let bodyEnd: Int
            if let length {
                guard j + length < bytes.endIndex else { break }
                bodyEnd = j + length
                guard bytes[bodyEnd] == 0 else { return .failure(AppProtocolSyntaxError("a STOMP body of content-length \(length) must be followed by a NUL")) }
            } else {
                guard let nul = bytes[j...].firstIndex(of: 0) else { break }
                bodyEnd = nul
            }
            let body = bytes[j..<bodyEnd]
            i = bodyEnd + 1
            let view: JSONValue = ["command": .string(command), "headers": .object(headers), "body": Self.bodyView(body)]
            messages.append(AppProtocolMessage(text: String(decoding: bytes[start..<i], as: UTF8.self), view: view))
        }
        return .success((messages, i - bytes.startIndex))
    }

    /// A line without its `\r`.
    private static func line(_ bytes: ArraySlice<UInt8>) -> String {
        String(decoding: bytes.last == UInt8(ascii: "\r") ? bytes.dropLast() : bytes, as: UTF8.self)
    }

    /// A JSON object or array inlined; anything else a string.
    static func bodyView(_ body: ArraySlice<UInt8>) -> JSONValue {
        if let first = body.first(where: { $0 != 0x20 && $0 != 0x0A && $0 != 0x0D && $0 != 0x09 }), first == UInt8(ascii: "{") || first == UInt8(ascii: "["),
            let json = try? JSONValue.parse(body)
        {
            return json
        }
        return .string(String(decoding: body, as: UTF8.self))
    }

    static func unescape(_ s: Substring) -> String {
        guard s.utf8.contains(UInt8(ascii: "\\")) else { return String(s) }
        var out = ""
        var escaping = false
        for c in s {
            if escaping {
                switch c {
                case "n": out.append("\n")
                case "r": out.append("\r")
                case "c": out.append(":")
                default: out.append(c)
                }
                escaping = false
            } else if c == "\\" {
                escaping = true
            } else {
                out.append(c)
            }
        }
        return out
    }

    static func escape(_ s: String) -> String {
        guard s.utf8.contains(where: { $0 == UInt8(ascii: "\\") || $0 == 0x0A || $0 == 0x0D || $0 == UInt8(ascii: ":") }) else { return s }
        var out = ""
        for c in s {
            switch c {
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case ":": out += "\\c"
            default: out.append(c)
            }
        }
        return out
    }

    package func wireText(_ view: JSONValue) -> String {
        guard let command = view["command"]?.stringValue else { return view.serialized }
        let body: String
        switch view["body"] {
        case .string(let s)?: body = s
        case nil, .null?: body = ""
        case let json?: body = json.serialized
        }
        let escaped = command != "CONNECT" && command != "CONNECTED"
        var out = command + "\n"
        if case .object(let headers)? = view["headers"] {
            for (name, value) in headers {
                var text = value.stringValue ?? value.serialized
                if name == "content-length" { text = String(body.utf8.count) }
                out += escaped ? "\(Self.escape(name)):\(Self.escape(text))\n" : "\(name):\(text)\n"
            }
        }
        return out + "\n" + body + "\0"
    }

    private static func header(_ view: JSONValue, _ name: String) -> String? { view["headers"]?[name]?.stringValue }

    // MARK: - Ids

    package func classify(fromApp message: JSONValue) -> AppOp {
        guard let command = message["command"]?.stringValue else { return .invalid("send a STOMP frame") }
        switch command {
        case "CONNECT", "STOMP": return .handshake
        case "DISCONNECT": return .ping  // answered here (its receipt): the link is everyone's
        case "SUBSCRIBE":
            guard let id = Self.header(message, "id") else { return .invalid("SUBSCRIBE needs an id header (STOMP 1.2)") }
            guard Self.header(message, "destination") != nil else { return .invalid("SUBSCRIBE needs a destination header") }
            return .subscribe(id: WireID(.string(id)), key: Self.subscriptionKey(message))
        case "UNSUBSCRIBE":
            guard let id = Self.header(message, "id") else { return .invalid("UNSUBSCRIBE needs the id header of the subscription it ends") }
            return .unsubscribe(id: nil, target: WireID(.string(id)))
        case "SEND", "ACK", "NACK", "BEGIN", "COMMIT", "ABORT":
            guard let receipt = Self.header(message, "receipt") else { return .other }
            return .call(id: WireID(.string(receipt)))
        default:
            return .invalid("\(command) is not a STOMP 1.2 client frame (SEND, SUBSCRIBE, UNSUBSCRIBE, ACK, NACK, BEGIN, COMMIT, ABORT, DISCONNECT)")
        }
    }

    /// A subscription's destination and headers, but its id and receipt: two apps' identical
    /// subscriptions are one upstream.
    static func subscriptionKey(_ message: JSONValue) -> String {
        guard case .object(let headers)? = message["headers"] else { return "" }
        return headers.filter { $0.0 != "id" && $0.0 != "receipt" }.sorted { $0.0 < $1.0 }.map { "\($0.0):\($0.1.stringValue ?? "")" }.joined(separator: "\n")
    }

    package func classify(fromUpstream message: JSONValue) -> UpstreamOp {
        switch message["command"]?.stringValue {
        case "CONNECTED": return .ack
        case "MESSAGE":
            guard let subscription = Self.header(message, "subscription") else { return .broadcast }
            return .answer(id: WireID(.string(subscription)), final: false)
        case "RECEIPT":
            guard let receipt = Self.header(message, "receipt-id") else { return .swallow }
            return .answer(id: WireID(.string(receipt)), final: true)
        case "ERROR":
            let what = Self.header(message, "message") ?? "ERROR"
            let body = message["body"].map { $0.stringValue ?? $0.serialized } ?? ""
            return .error(body.isEmpty ? what : "\(what): \(body.prefix(200))", fatal: true)
        default:
            return .broadcast
        }
    }

    /// A RECEIPT, or the ERROR that tells a call's app the link went: by their receipt id.
    package func answerIDs(in message: JSONValue) -> [(id: WireID, final: Bool)] {
        if let receipt = Self.header(message, "receipt-id") { return [(WireID(.string(receipt)), true)] }
        if message["command"]?.stringValue == "MESSAGE", let subscription = Self.header(message, "subscription") {
            return [(WireID(.string(subscription)), false)]
        }
        return []
    }

    package func timing(in message: JSONValue) -> AppProtocolTiming? {
        guard message["command"]?.stringValue == "CONNECTED" else { return nil }
        let parts = (Self.header(message, "heart-beat") ?? "0,0").split(separator: ",").map { Int($0.trimmingSpaces()) ?? 0 }
        let (sx, sy) = (parts.first ?? 0, parts.count > 1 ? parts[1] : 0)
        let (cx, cy) = self.heartBeat
        // STOMP 1.2 §Heart-beating: each side's interval is the larger of what one offers and the
        // other wants; nothing when either says 0.
        let send = cx == 0 || sy == 0 ? nil : Int64(max(cx, sy))
        let receive = sx == 0 || cy == 0 ? nil : Int64(max(sx, cy))
        guard send != nil || receive != nil else { return nil }
        // A server heart-beat may be late by network delay: the deadline is twice its interval.
        return AppProtocolTiming(sendEvery: send, text: "\n", deadline: receive.map { $0 * 2 })
    }

    package func replacingID(in message: JSONValue, with id: WireID) -> JSONValue {
        let name: String
        switch message["command"]?.stringValue {
        case "SUBSCRIBE", "UNSUBSCRIBE": name = "id"
        case "MESSAGE": name = "subscription"
        case "RECEIPT", "ERROR": name = "receipt-id"
        default: name = "receipt"
        }
        guard var headers = message["headers"] else { return message }
        headers = headers.setting(name, to: id.json)
        if message["command"]?.stringValue == "SUBSCRIBE", case .object(let members) = headers {
            // Its receipt was answered when the app subscribed: a later open asks for none.
            headers = .object(members.filter { $0.0 != "receipt" })
        }
        return message.setting("headers", to: headers)
    }

    package func receipt(for message: JSONValue) -> JSONValue? {
        guard let receipt = Self.header(message, "receipt") else { return nil }
        return ["command": "RECEIPT", "headers": ["receipt-id": .string(receipt)], "body": ""]
    }

    package func handshakeAnswer(acknowledgement: JSONValue?) -> JSONValue {
        // The heart-beats are the daemon's business: the app is asked for none.
        var connected = acknowledgement ?? ["command": "CONNECTED", "headers": ["version": "1.2"], "body": ""]
        if let headers = connected["headers"] { connected = connected.setting("headers", to: headers.setting("heart-beat", to: "0,0")) }
        return connected
    }

    /// An app's DISCONNECT: its receipt, if it asked for one (the link stays up for the others).
    package func pong(to ping: JSONValue) -> JSONValue? { self.receipt(for: ping) }

    package func endMessage(upstreamID: WireID, serverID: WireID?, callID: WireID) -> JSONValue? {
        ["command": "UNSUBSCRIBE", "headers": ["id": upstreamID.json], "body": ""]
    }

    package func linkLostAnswer(id: WireID, reason: String) -> JSONValue {
        ["command": "ERROR", "headers": ["receipt-id": id.json, "message": .string("wsbridged: \(reason)")], "body": ""]
    }
}
