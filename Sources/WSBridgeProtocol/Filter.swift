/// Matches upstream messages whose JSON `field` (a dotted path) equals `equals`, or merely
/// exists when `equals` is nil. The path is split once, here, not for every message.
public struct Filter: Sendable, Equatable {
    public let field: String
    public let equals: JSONValue?
    /// `field` split at its dots.
    public let path: [JSONValue.PathComponent]

    public init(field: String, equals: JSONValue?) {
        self.field = field
        self.equals = equals
        self.path = JSONValue.PathComponent.split(field)
    }

    public func matches(_ message: JSONValue) -> Bool {
        guard let value = message.value(at: self.path) else { return false }
        guard let equals = self.equals else { return true }
        return value == equals
    }

    public static func == (a: Filter, b: Filter) -> Bool { a.field == b.field && a.equals == b.equals }

    /// `FIELD=VALUE` or `FIELD` (the syntax of `wsbridgectl tail --filter` and
    /// `upstream.ready_when`): VALUE is read as JSON when it is JSON (`7`, `true`, `"x"`), else
    /// as text.
    public init(parsing text: String) {
        guard let eq = text.firstIndex(of: "=") else {
            self.init(field: text, equals: nil)
            return
        }
        let raw = String(text[text.index(after: eq)...])
        self.init(field: String(text[..<eq]), equals: (try? JSONValue.parse(raw)) ?? .string(raw))
    }

    /// The filter as `FIELD=VALUE` text (VALUE in JSON), for messages.
    public var text: String { self.equals.map { "\(self.field)=\($0.serialized)" } ?? self.field }

    public var json: JSONValue { WireCoding.encode(self) }
}

extension Filter: Codable {
    private enum CodingKeys: String, CodingKey {
        case field, equals
    }

    /// `equals` is left out when the filter only asks for the field; `"equals": null` matches null.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        // Not `contains ? value : nil`: JSONValue takes the nil literal, as .null.
        var equals: JSONValue?
        if c.contains(.equals) { equals = try c.decode(JSONValue.self, forKey: .equals) }
        self.init(field: try c.decode(String.self, forKey: .field), equals: equals)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(self.field, forKey: .field)
        if let equals = self.equals { try c.encode(equals, forKey: .equals) }
    }
}
