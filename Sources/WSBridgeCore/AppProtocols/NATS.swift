import WSBridgeProtocol

/// The NATS client protocol over WebSocket: text operations ending in CRLF (`MSG`, `PUB` and
/// their `H` forms followed by a payload of the size they give), several to a WebSocket message
/// and one possibly across several. The daemon's `CONNECT` (then a `SUB` to its inbox and a
/// `PING`) is an opening message and the `PONG` the ready gate; it answers the server's `PING`
/// and sends its own (`heartbeat.text`). `SUB` sids are rewritten per app (the same subject and
/// queue group go upstream once) and `MSG`s routed by sid; a `PUB` with a reply subject is a call
/// whose reply goes to the daemon's inbox and back to its app (unless the app subscribed to a
/// subject covering it, as client libraries do: then it goes as it is).
///
/// The view: `{"op":"MSG","subject":…,"sid":…,"reply":…,"payload":…}` (the payload inlined when
/// it is a JSON object or array, else a string; `HMSG`/`HPUB` add `"headers"`), `{"op":"SUB",
/// "subject":…,"queue":…,"sid":…}`, `{"op":"INFO","info":{…}}`, `{"op":"-ERR","error":…}`…
package struct NATS: AppProtocolCodec {
    /// The daemon's inbox: replies to apps' calls come to `inbox` + the call's id.
    package let inbox: String
    /// Its bytes, for scans.
    let inboxBytes: [UInt8]

    package init(settings: Configuration.ApplicationProtocol) {
        self.init()
    }

    /// CONNECT (with `[protocol]` name, user, pass and token), the process's reply inbox, then a
    /// PING whose PONG is the gate (with verbose off nothing else says the server took the
    /// CONNECT); and the daemon's own PING with every WebSocket ping: the PONG shows it alive.
    package static func connection(_ settings: Configuration.ApplicationProtocol) -> AppProtocolConnection {
        var options = #"{"verbose":false,"pedantic":false,"lang":"wsbridged","version":"\#(WSBridgeVersion.current)","protocol":1,"headers":true"#
        for (key, value) in [("name", settings.clientName ?? "wsbridged"), ("user", settings.user), ("pass", settings.pass), ("auth_token", settings.token)] {
            if let value { options += ",\(JSONValue.string(key).serialized):\(JSONValue.string(value).serialized)" }
        }
        return AppProtocolConnection(
            opening: "CONNECT \(options)}\r\nSUB \(Self.processInbox)* \(Self.inboxSID)\r\nPING\r\n", readyWhen: Filter(.contains("PONG\r\n")),
            heartbeatText: "PING\r\n")
    }

    package init(inbox: String = NATS.processInbox) {
        self.inbox = inbox
        self.inboxBytes = Array(inbox.utf8)
    }

    /// One per daemon process, the same across reloads.
    package static let processInbox: String = {
        var random = SystemRandomNumberGenerator()
        let n = random.next() as UInt64
        return "_INBOX.wsbridged-\(String(n, radix: 16))."
    }()

    /// The inbox subscription's sid (the apps' sids are rewritten to 1, 2, …).
    package static let inboxSID = "0"

    package var name: String { "nats" }
    package var isText: Bool { true }

    package func wireID(_ n: UInt64) -> WireID { WireID(.string(String(n))) }

    // MARK: - Operations

    package func split(_ bytes: ArraySlice<UInt8>) -> Result<(messages: [AppProtocolMessage], consumed: Int), AppProtocolSyntaxError> {
        var messages: [AppProtocolMessage] = []
        var i = bytes.startIndex
        let nl = UInt8(ascii: "\n")
        while i < bytes.endIndex {
            guard let end = bytes[i...].firstIndex(of: nl) else { break }
            let start = i
            let lineEnd = end > i && bytes[end - 1] == UInt8(ascii: "\r") ? end - 1 : end
            let line = bytes[i..<lineEnd]
            i = end + 1
            if line.isEmpty { continue }
            let words = line.split(whereSeparator: { $0 == 0x20 || $0 == 0x09 }).map { String(decoding: $0, as: UTF8.self) }
            let op = words[0].uppercased()
            var view: JSONValue
            switch op {
            case "MSG", "HMSG", "PUB", "HPUB":
                let headed = op.hasPrefix("H")
                let withSID = op.hasSuffix("MSG")
                // MSG subject sid [reply] size; HMSG subject sid [reply] hsize size; PUB subject [reply] size…
                let fixed = 3 + (withSID ? 1 : 0) + (headed ? 1 : 0)
                guard words.count == fixed || words.count == fixed + 1, let total = Int(words.last!), total >= 0 else {
                    return .failure(
                        AppProtocolSyntaxError("\(op) is \(Self.usage[op]!), not \(String(decoding: line.prefix(80), as: UTF8.self).debugDescription)"))
                }
                let headerSize = headed ? Int(words[words.count - 2]) : 0
                guard let headerSize, headerSize >= 0, headerSize <= total else {
                    return .failure(AppProtocolSyntaxError("\(op)'s header size must be a count of bytes no larger than its total size"))
                }
                // The payload and its CRLF.
                guard i + total + 2 <= bytes.endIndex else {
                    i = start
                    return .success((messages, i - bytes.startIndex))
                }
                guard bytes[i + total] == UInt8(ascii: "\r"), bytes[i + total + 1] == nl else {
                    return .failure(AppProtocolSyntaxError("\(op)'s payload must be exactly the \(total) bytes it gives, then CRLF"))
                }
                view = ["op": .string(op), "subject": .string(words[1])]
                if withSID { view = view.setting("sid", to: .string(words[2])) }
                if words.count == fixed + 1 { view = view.setting("reply", to: .string(words[withSID ? 3 : 2])) }
                if headed { view = view.setting("headers", to: .string(String(decoding: bytes[i..<(i + headerSize)], as: UTF8.self))) }
                view = view.setting("payload", to: STOMP.bodyView(bytes[(i + headerSize)..<(i + total)]))
                i += total + 2
            case "SUB":
                guard words.count == 3 || words.count == 4 else {
                    return .failure(AppProtocolSyntaxError("SUB is SUB <subject> [queue group] <sid>"))
                }
                view = ["op": "SUB", "subject": .string(words[1])]
                if words.count == 4 { view = view.setting("queue", to: .string(words[2])) }
                view = view.setting("sid", to: .string(words.last!))
            case "UNSUB":
                guard words.count == 2 || words.count == 3 else { return .failure(AppProtocolSyntaxError("UNSUB is UNSUB <sid> [max messages]")) }
                view = ["op": "UNSUB", "sid": .string(words[1])]
                if words.count == 3 { view = view.setting("max", to: .string(words[2])) }
            case "INFO", "CONNECT":
                let rest = line.dropFirst(words[0].utf8.count).drop(while: { $0 == 0x20 || $0 == 0x09 })
                guard let json = try? JSONValue.parse(rest) else { return .failure(AppProtocolSyntaxError("\(op) is followed by a JSON object")) }
                view = ["op": .string(op), op == "INFO" ? "info" : "options": json]
            case "PING", "PONG", "+OK":
                view = ["op": .string(op)]
            case "-ERR":
                let rest = String(decoding: line.dropFirst(4), as: UTF8.self).trimmingSpaces()
                view = ["op": "-ERR", "error": .string(rest.trimming(while: { $0 == "'" }))]
            default:
                return .failure(
                    AppProtocolSyntaxError(
                        "\(String(op.prefix(20)).debugDescription) is not a NATS operation (PUB, HPUB, SUB, UNSUB, PING, PONG; from the server INFO, MSG, HMSG, +OK, -ERR)"
                    ))
            }
            messages.append(AppProtocolMessage(text: String(decoding: bytes[start..<i], as: UTF8.self), view: view))
        }
        return .success((messages, i - bytes.startIndex))
    }

    static let usage = [
        "MSG": "MSG <subject> <sid> [reply] <size>", "HMSG": "HMSG <subject> <sid> [reply] <header size> <total size>",
        "PUB": "PUB <subject> [reply] <size>", "HPUB": "HPUB <subject> [reply] <header size> <total size>",
    ]

    package func wireText(_ view: JSONValue) -> String {
        guard let op = view["op"]?.stringValue else { return view.serialized }
        func s(_ key: String) -> String? { view[key]?.stringValue }
        switch op {
        case "MSG", "HMSG", "PUB", "HPUB":
            let payload: String
            switch view["payload"] {
            case .string(let p)?: payload = p
            case nil, .null?: payload = ""
            case let json?: payload = json.serialized
            }
            let headers = op.hasPrefix("H") ? (s("headers") ?? "") : ""
            var words = [op, s("subject") ?? ""]
            if op.hasSuffix("MSG") { words.append(s("sid") ?? "") }
            if let reply = s("reply") { words.append(reply) }
            if op.hasPrefix("H") { words.append(String(headers.utf8.count)) }
            words.append(String(headers.utf8.count + payload.utf8.count))
            return words.joined(separator: " ") + "\r\n" + headers + payload + "\r\n"
        case "SUB":
            return (["SUB", s("subject") ?? ""] + (s("queue").map { [$0] } ?? []) + [s("sid") ?? ""]).joined(separator: " ") + "\r\n"
        case "UNSUB":
            return (["UNSUB", s("sid") ?? ""] + (s("max").map { [$0] } ?? [])).joined(separator: " ") + "\r\n"
        case "INFO": return "INFO \((view["info"] ?? [:]).serialized)\r\n"
        case "CONNECT": return "CONNECT \((view["options"] ?? [:]).serialized)\r\n"
        case "-ERR": return "-ERR '\(s("error") ?? "")'\r\n"
        default: return op + "\r\n"
        }
    }

    // MARK: - Ids

    package func classify(fromApp message: JSONValue) -> AppOp {
        switch message["op"]?.stringValue {
        case "CONNECT": return .handshake
        case "PING": return .ping
        case "PONG": return .swallow
        case "SUB":
            guard let sid = message["sid"]?.stringValue, let subject = message["subject"]?.stringValue else { return .invalid("SUB needs a subject and a sid") }
            return .subscribe(id: WireID(.string(sid)), key: subject + (message["queue"]?.stringValue.map { " " + $0 } ?? ""))
        case "UNSUB":
            guard message["max"] == nil else {
                return .invalid(
                    "UNSUB with a count of messages is not supported on the shared link (others may share the subscription): UNSUB <sid> without it once done")
            }
            guard let sid = message["sid"]?.stringValue else { return .invalid("UNSUB needs a sid") }
            return .unsubscribe(id: nil, target: WireID(.string(sid)))
        case "PUB", "HPUB":
            guard let reply = message["reply"]?.stringValue else { return .other }
            return .call(id: WireID(.string(reply)))
        default:
            return .invalid("send NATS client operations: PUB, HPUB, SUB, UNSUB (PING and CONNECT are answered here)")
        }
    }

    package func classify(fromUpstream message: JSONValue) -> UpstreamOp {
        switch message["op"]?.stringValue {
        case "PING": return .ping
        case "PONG", "+OK", "INFO": return .swallow
        case "-ERR":
            // A fatal one closes the connection from the server's side; the link sees that.
            let text = message["error"]?.stringValue ?? "-ERR"
            return Self.refusedSubscription(text).map { .refused(key: $0, text) } ?? .error(text, fatal: false)
        case "MSG", "HMSG":
            if let subject = message["subject"]?.stringValue, subject.hasPrefix(self.inbox) {
                return .answer(id: WireID(.string(String(subject.dropFirst(self.inbox.utf8.count)))), final: true)
            }
            guard let sid = message["sid"]?.stringValue else { return .broadcast }
            return .answer(id: WireID(.string(sid)), final: false)
        default:
            return .broadcast
        }
    }

    /// The subscription key (subject, and queue group) a permissions violation names:
    /// `Permissions Violation for Subscription to "a.b" using queue "q"`; nil for another error.
    static func refusedSubscription(_ text: String) -> String? {
        let prefix = "Permissions Violation for Subscription to "
        guard text.hasPrefix(prefix) else { return nil }
        let quoted = text.dropFirst(prefix.count).split(separator: "\"", omittingEmptySubsequences: false)
        // ["", subject, " using queue ", queue, ""] or ["", subject, ""]
        guard quoted.count >= 3, quoted[0].isEmpty else { return nil }
        return quoted.count >= 5 && quoted[2] == " using queue " ? "\(quoted[1]) \(quoted[3])" : String(quoted[1])
    }

    package func answerIDs(in message: JSONValue) -> [(id: WireID, final: Bool)] {
        var ids: [(id: WireID, final: Bool)] = []
        if let sid = message["sid"]?.stringValue { ids.append((WireID(.string(sid)), false)) }
        if let subject = message["subject"]?.stringValue { ids.append((WireID(.string(subject)), true)) }
        return ids
    }

    package func replacingID(in message: JSONValue, with id: WireID) -> JSONValue {
        switch message["op"]?.stringValue {
        case "PUB", "HPUB":
            return message.setting("reply", to: .string(self.inbox + (id.json.stringValue ?? id.key)))
        case "MSG", "HMSG":
            if let subject = message["subject"]?.stringValue, subject.hasPrefix(self.inbox) {
                // A call's reply: on the subject the app gave, with no subscription of its own.
                return message.setting("subject", to: id.json).setting("sid", to: .string(Self.inboxSID))
            }
            return message.setting("sid", to: id.json)
        default:
            return message.setting("sid", to: id.json)
        }
    }

    package var callsMayBeCovered: Bool { true }

    package func subscription(_ key: String, covers id: WireID) -> Bool {
        guard let subject = id.json.stringValue, let pattern = key.split(separator: " ").first else { return false }
        return Self.subject(subject, matches: pattern)
    }

    /// NATS subject matching: `*` one token, `>` the rest (one token at least).
    static func subject(_ subject: String, matches pattern: Substring) -> Bool {
        let s = subject.split(separator: ".", omittingEmptySubsequences: false)
        let p = pattern.split(separator: ".", omittingEmptySubsequences: false)
        for (i, token) in p.enumerated() {
            if token == ">" { return s.count > i }
            guard i < s.count, token == "*" || token == s[i] else { return false }
        }
        return s.count == p.count
    }

    package func handshakeAnswer(acknowledgement: JSONValue?) -> JSONValue { ["op": "+OK"] }

    package func pong(to ping: JSONValue) -> JSONValue? { ["op": "PONG"] }

    /// A queue group's key is its subject and its group (`classify`'s `.subscribe`).
    package func sharesInTurn(key: String) -> Bool { key.contains(" ") }

    package func endMessage(upstreamID: WireID, serverID: WireID?, callID: WireID) -> JSONValue? { ["op": "UNSUB", "sid": upstreamID.json] }

    /// A reply that will not come, the way NATS says it of a request nobody answered: a
    /// `503` status in the headers, on the reply subject.
    package func linkLostAnswer(id: WireID, reason: String) -> JSONValue {
        let line = reason.replacing("\r", with: " ").replacing("\n", with: " ")
        return [
            "op": "HMSG", "subject": id.json, "sid": .string(Self.inboxSID), "headers": .string("NATS/1.0 503\r\nWsbridged-Error: \(line)\r\n\r\n"),
            "payload": "",
        ]
    }
}
