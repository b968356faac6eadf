import WSBridgeProtocol

/// `json`: a JSON protocol the daemon knows only by its id's path (`[protocol] id`) and its
/// keepalive rules (`[[protocol.reply]]`). An app's message that carries an id is a call,
/// answered by the first upstream message with the same id; an app's sticky send that carries an
/// id is a subscription (Home Assistant's `subscribe_events`, whose events carry its id): sent
/// again on every open with a fresh id, what carries its id routed to its holders. Ids the daemon
/// puts on the wire are numbers from a counter that only rises, which such servers demand.
/// Upstream messages with an id nobody holds are for everyone (a feed's `id` may be data).
package struct JSONProtocol: AppProtocolCodec {
    /// One `[[protocol.reply]]`: an upstream message that `when` matches is answered with `send`.
    package typealias Reply = Configuration.ApplicationProtocol.Reply

    package var idPath: [JSONValue.PathComponent]
    package var replies: [Reply]

    package init(settings: Configuration.ApplicationProtocol) {
        self.init(idPath: settings.idPath ?? "id", replies: settings.replies)
    }

    package init(idPath: String = "id", replies: [Reply] = []) {
        self.idPath = JSONValue.PathComponent.split(idPath)
        self.idScan = JSONPathScan.Path(self.idPath)
        self.replies = replies
    }

    package var name: String { "json" }
    package var answersEndSubscriptions: Bool { false }
    package var unknownAnswersBroadcast: Bool { true }
    /// The id's first key, and each reply filter's.
    package var routingKeys: [String]? {
        [self.idPath.first?.key ?? "id"] + self.replies.compactMap { $0.when.path.first?.key }
    }

    /// The id's path, for scans (`+Scan`).
    let idScan: JSONPathScan.Path

    package func wireID(_ n: UInt64) -> WireID { WireID(.number(JSONNumber(n))) }

    private func id(in message: JSONValue) -> WireID? {
        guard let id = message.value(at: self.idPath) else { return nil }
        switch id {
        case .string, .number: return WireID(id)
        default: return nil
        }
    }

    package func classify(fromApp message: JSONValue) -> AppOp {
        guard let id = self.id(in: message) else { return .other }
        return .call(id: id)
    }

    package func subscriptionID(inSticky message: JSONValue) -> WireID? { self.id(in: message) }

    package func classify(fromUpstream message: JSONValue) -> UpstreamOp {
        if self.replies.contains(where: { $0.when.matches(message) }) { return .ping }
        guard let id = self.id(in: message) else { return .broadcast }
        return .answer(id: id, final: true)
    }

    package func messageID(in message: JSONValue) -> WireID? { self.id(in: message) }

    package func replacingID(in message: JSONValue, with id: WireID) -> JSONValue { message.setting(path: self.idPath[...], to: id.json) }

    package func handshakeAnswer(acknowledgement: JSONValue?) -> JSONValue { acknowledgement ?? .null }

    package func pong(to ping: JSONValue) -> JSONValue? {
        guard let reply = self.replies.first(where: { $0.when.matches(ping) }) else { return nil }
        return reply.send.render(ping)
    }

    package func endMessage(upstreamID: WireID, serverID: WireID?, callID: WireID) -> JSONValue? { nil }

    package func linkLostAnswer(id: WireID, reason: String) -> JSONValue {
        let answer: JSONValue = ["error": .string("wsbridged: \(reason)")]
        return self.replacingID(in: answer, with: id)
    }
}

/// `[[protocol.reply]]`'s `send`: JSON text in which `${msg:PATH}` stands for the JSON text of the
/// matched message's value at PATH (`{"pong":${msg:ping}}`).
public struct ReplyTemplate: Sendable, Equatable {
    enum Part: Sendable, Equatable {
        case text(String)
        case value([JSONValue.PathComponent], String)
    }

    let parts: [Part]
    package let source: String

    /// Reads the template; the error says what is wrong with it.
    package init(parsing source: String) throws(TemplateError) {
        var parts: [Part] = []
        var rest = Substring(source)
        while let start = rest.firstRange(of: "${") {
            if start.lowerBound > rest.startIndex { parts.append(.text(String(rest[..<start.lowerBound]))) }
            let after = rest[start.upperBound...]
            guard let end = after.firstIndex(of: "}") else { throw .notClosed }
            let name = after[..<end]
            guard name.hasPrefix("msg:"), name.count > 4 else {
                throw .unknown(String(name))
            }
            let path = String(name.dropFirst(4))
            parts.append(.value(JSONValue.PathComponent.split(path), path))
            rest = after[after.index(after: end)...]
        }
        if !rest.isEmpty { parts.append(.text(String(rest))) }
        self.parts = parts
        self.source = source
        // JSON once filled in (with a number: a value's JSON text).
        let sample = parts.map { part -> String in
            if case .text(let t) = part { return t }
            return "0"
        }.joined()
        guard (try? JSONValue.parse(sample)) != nil else {
            throw .notJSON
        }
    }

    /// The reply to `message` (nil: a value it names is missing, or the result is not JSON).
    package func render(_ message: JSONValue) -> JSONValue? {
        var text = ""
        for part in self.parts {
            switch part {
            case .text(let t): text += t
            case .value(let path, _):
                guard let value = message.value(at: path) else { return nil }
                text += value.serialized
            }
        }
        return try? JSONValue.parse(text)
    }

    /// What is wrong with `[protocol] reply`'s template: every text is here.
    public enum TemplateError: Error, CustomStringConvertible {
        case notClosed
        case unknown(String)
        case notJSON

        public var description: String {
            switch self {
            case .notClosed: "\"${\" is not closed: write ${msg:PATH}"
            case .unknown(let name): "unknown placeholder ${\(name)}: the one known here is ${msg:PATH}, the matched message's value at PATH"
            case .notJSON: "is not JSON once ${msg:PATH} is filled in: write JSON text such as '{\"pong\":${msg:ping}}'"
            }
        }
    }
}

extension JSONValue {
    /// This value with the member at `path` set to `value` (objects made on the way as needed).
    package func setting(path: ArraySlice<PathComponent>, to value: JSONValue) -> JSONValue {
        guard let first = path.first else { return value }
        if path.count == 1 { return self.setting(first.key, to: value) }
        switch self {
        case .object:
            let inner = self[first.key] ?? .object([])
            return self.setting(first.key, to: inner.setting(path: path.dropFirst(), to: value))
        case .array(var items):
            guard let i = first.index, items.indices.contains(i) else { return self }
            items[i] = items[i].setting(path: path.dropFirst(), to: value)
            return .array(items)
        default:
            return self
        }
    }
}
