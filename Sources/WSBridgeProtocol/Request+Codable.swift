import ExtrasBase64

extension Request: Codable {
    private enum Field: String, CodingKey {
        case id, op, v, text, binary, filter, since, stream, all, key, scope, sticky, code, reason, match, timeout
        case onUnstick = "on_unstick"
    }

    private typealias Fields = KeyedDecodingContainer<Field>

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Field.self)
        let id = try c.decodeIfPresent(JSONValue.self, forKey: .id)
        if let id {
            switch id {
            case .string, .number: break
            default: throw ProtocolError(.wrongType, "\"id\" must be a string or a number, not \(id.typeName)")
            }
        }
        do {
            self.init(id: id, command: try Self.command(c))
        } catch let error as ProtocolError {
            throw error.with(id: id)
        } catch let error as JSONValueDecodingError {
            throw ProtocolError(error, id: id)
        }
    }

    private static func command(_ c: Fields) throws -> Command {
        if let v = try c.decodeIfPresent(JSONValue.self, forKey: .v), v.intValue != LocalProtocol.version {
            throw ProtocolError(
                .badVersion,
                "protocol version \(v.serialized) is not supported: this daemon speaks version \(LocalProtocol.version); upgrade the client or omit \"v\"")
        }
        guard let name = try c.decodeIfPresent(String.self, forKey: .op) else {
            throw ProtocolError(.missingField, "missing \"op\": one of \(Op.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        guard let op = Op(rawValue: name) else {
            throw ProtocolError(.unknownOp, "unknown op \"\(name)\": use one of \(Op.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        switch op {
        case .subscribe:
            let filter = try c.decodeIfPresent(Filter.self, forKey: .filter)
            let since = try c.decodeIfPresent(UInt64.self, forKey: .since)
            let stream = try c.decodeIfPresent(String.self, forKey: .stream)
            if stream != nil && since == nil {
                throw ProtocolError(.missingField, "\"stream\" goes with \"since\": give the last seq you received in that stream")
            }
            let all = try c.decodeIfPresent(Bool.self, forKey: .all) ?? false
            if all && since != nil {
                throw ProtocolError(.invalidValue, "\"all\" shows the live wire as it is, with nothing replayed: leave out \"since\"")
            }
            return .subscribe(filter: filter, since: since, stream: stream, all: all)
        case .unsubscribe: return .unsubscribe
        case .status: return .status
        case .clients: return .clients
        case .metrics: return .metrics
        case .connect: return .connect
        case .reconnect: return .reconnect
        case .sticky: return .sticky
        case .clearSetAside: return .clearSetAside
        case .send: return .send(try Self.payload(c, op: op), sticky: try Self.sticky(c))
        case .unstick:
            guard let key = try c.decodeIfPresent(String.self, forKey: .key) else {
                throw ProtocolError(.missingField, "unstick needs \"key\": the sticky key to remove")
            }
            return .unstick(key: key, text: try c.decodeIfPresent(String.self, forKey: .text), scope: try Self.scope(c))
        case .close:
            let code = try c.decodeIfPresent(UInt64.self, forKey: .code).map { UInt16(clamping: $0) } ?? 1000
            guard code == 1000 || code == 1001 || (3000...4999).contains(code) else {
                throw ProtocolError(.invalidValue, "\"code\" \(code) cannot be sent: use 1000 (normal), 1001 (going away) or 3000-4999")
            }
            let reason = try c.decodeIfPresent(String.self, forKey: .reason) ?? ""
            guard reason.utf8.count <= 123 else {
                throw ProtocolError(.invalidValue, "\"reason\" is \(reason.utf8.count) bytes: a close reason holds at most 123 bytes of UTF-8")
            }
            return .close(code: code, reason: reason)
        case .request:
            let payload = try Self.payload(c, op: op)
            let match = try c.decodeIfPresent(Filter.self, forKey: .match)
            let seconds = try c.decodeIfPresent(Double.self, forKey: .timeout) ?? 10
            guard seconds > 0, seconds <= 3600 else {
                let got = seconds == seconds.rounded() && abs(seconds) < 1e15 ? String(Int64(seconds)) : "\(seconds)"
                throw ProtocolError(.invalidValue, "\"timeout\" must be more than 0 and at most 3600 seconds, got \(got)")
            }
            return .request(payload, match: match, timeout: .nanoseconds(Int64(seconds * 1e9)))
        }
    }

    /// `text` (a string) or `binary` (base64), exactly one.
    private static func payload(_ c: Fields, op: Op) throws -> Payload {
        switch (try c.decodeIfPresent(String.self, forKey: .text), try c.decodeIfPresent(String.self, forKey: .binary)) {
        case (let text?, nil):
            return .text(text)
        case (nil, let binary?):
            guard let bytes = try? Base64.decode(string: binary) else {
                throw ProtocolError(.invalidValue, "\"binary\" is not valid base64: encode the bytes with standard base64 (RFC 4648)")
            }
            return .binary(bytes)
        case (nil, nil):
            throw ProtocolError(.missingField, "\(op.rawValue) needs \"text\" (a string) or \"binary\" (base64)")
        case (_?, _?):
            throw ProtocolError(.invalidValue, "give either \"text\" or \"binary\", not both")
        }
    }

    /// `"scope": "client" | "daemon"`, or nil.
    private static func scope(_ c: Fields) throws -> StickyScope? {
        guard let name = try c.decodeIfPresent(String.self, forKey: .scope) else { return nil }
        guard let scope = StickyScope(rawValue: name) else {
            throw ProtocolError(
                .invalidValue,
                "\"scope\" must be \"client\" (ends with this connection, the default) or \"daemon\" (lasts until unstick), not \"\(name)\"")
        }
        return scope
    }

    /// `"sticky": KEY` with optional `"scope"` and `"on_unstick"`, or nil for a plain send.
    private static func sticky(_ c: Fields) throws -> StickyOptions? {
        guard let key = try c.decodeIfPresent(String.self, forKey: .sticky) else {
            if c.contains(.scope) || c.contains(.onUnstick) {
                throw ProtocolError(.missingField, "\"scope\" and \"on_unstick\" go with \"sticky\": name the key, as in \"sticky\":\"trades\"")
            }
            return nil
        }
        guard !key.isEmpty, key.utf8.count <= StickyOptions.maxKeyBytes else {
            throw ProtocolError(.invalidValue, "\"sticky\" must be a key of 1 to \(StickyOptions.maxKeyBytes) bytes, such as \"trades.BTC\"")
        }
        return StickyOptions(key: key, scope: try Self.scope(c) ?? .client, onUnstick: try c.decodeIfPresent(String.self, forKey: .onUnstick))
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Field.self)
        if let id = self.id { try c.encode(id, forKey: .id) }
        try c.encode(self.command.op.rawValue, forKey: .op)
        try c.encode(LocalProtocol.version, forKey: .v)
        func payload(_ payload: Payload) throws {
            switch payload {
            case .text(let text): try c.encode(text, forKey: .text)
            case .binary(let bytes): try c.encode(Base64.encodeToString(bytes: bytes), forKey: .binary)
            }
        }
        switch self.command {
        case .subscribe(let filter, let since, let stream, let all):
            if let filter { try c.encode(filter, forKey: .filter) }
            if let since { try c.encode(since, forKey: .since) }
            if let stream { try c.encode(stream, forKey: .stream) }
            if all { try c.encode(true, forKey: .all) }
        case .unsubscribe, .status, .clients, .metrics, .connect, .reconnect, .sticky, .clearSetAside:
            break
        case .send(let message, let sticky):
            try payload(message)
            if let sticky {
                try c.encode(sticky.key, forKey: .sticky)
                try c.encode(sticky.scope.rawValue, forKey: .scope)
                if let leave = sticky.onUnstick { try c.encode(leave, forKey: .onUnstick) }
            }
        case .unstick(let key, let text, let scope):
            try c.encode(key, forKey: .key)
            if let text { try c.encode(text, forKey: .text) }
            if let scope { try c.encode(scope.rawValue, forKey: .scope) }
        case .close(let code, let reason):
            try c.encode(code, forKey: .code)
            try c.encode(reason, forKey: .reason)
        case .request(let message, let match, let timeout):
            try payload(message)
            try c.encode(Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18, forKey: .timeout)
            if let match { try c.encode(match, forKey: .match) }
        }
    }
}
