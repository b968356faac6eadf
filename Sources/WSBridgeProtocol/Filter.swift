/// Matches upstream messages whose JSON `field` (a dotted path) equals `equals`, or merely
/// exists when `equals` is nil; or (`wholeText`, for any text, JSON or not) whose text begins
/// with or contains a string. The path is split once, here, not for every message.
public struct Filter: Sendable, Equatable {
    public let field: String
    public let equals: JSONValue?
    /// `field` split at its dots.
    public let path: [JSONValue.PathComponent]
    /// A test of the message's whole text instead of a field.
    public let wholeText: TextTest?

    public enum TextTest: Sendable, Equatable {
        case prefix(String)
        case contains(String)
    }

    public init(field: String, equals: JSONValue?) {
        self.field = field
        self.equals = equals
        self.path = JSONValue.PathComponent.split(field)
        self.wholeText = nil
    }

    public init(_ test: TextTest) {
        self.field = ""
        self.equals = nil
        self.path = []
        self.wholeText = test
    }

    /// Whether a message matches: `text` its bytes, `json` them parsed (nil: not JSON).
    public func matches(json: JSONValue?, text: some Collection<UInt8>) -> Bool {
        switch self.wholeText {
        case .prefix(let p)?: return text.starts(with: p.utf8)
        case .contains(let c)?: return Self.contains(text, Array(c.utf8))
        case nil: return json.map(self.matches) ?? false
        }
    }

    private static func contains(_ text: some Collection<UInt8>, _ needle: [UInt8]) -> Bool {
        guard let first = needle.first else { return true }
        var i = text.startIndex
        while let at = text[i...].firstIndex(of: first) {
            if text[at...].starts(with: needle) { return true }
            i = text.index(after: at)
        }
        return false
    }

    public func matches(_ message: JSONValue) -> Bool {
        guard self.wholeText == nil else { return self.matches(json: message, text: message.serialized.utf8) }
        guard let value = message.value(at: self.path) else { return false }
        guard let equals = self.equals else { return true }
        return value == equals
    }

    public static func == (a: Filter, b: Filter) -> Bool { a.field == b.field && a.equals == b.equals && a.wholeText == b.wholeText }

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
    public var text: String {
        switch self.wholeText {
        case .prefix(let p)?: return "text beginning \(JSONValue.string(p).serialized)"
        case .contains(let c)?: return "text containing \(JSONValue.string(c).serialized)"
        case nil: return self.equals.map { "\(self.field)=\($0.serialized)" } ?? self.field
        }
    }

}

extension Filter: JSONValueCodable {
    private enum CodingKeys: String, CodingKey {
        case field, equals, prefix, contains
    }

    /// `equals` is left out when the filter only asks for the field; `"equals": null` matches null.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        if let p = try c.decodeIfPresent(String.self, forKey: .prefix) {
            self.init(.prefix(p))
            return
        }
        if let t = try c.decodeIfPresent(String.self, forKey: .contains) {
            self.init(.contains(t))
            return
        }
        // Not `contains ? value : nil`: JSONValue takes the nil literal, as .null.
        var equals: JSONValue?
        if c.contains(.equals) { equals = try c.decode(JSONValue.self, forKey: .equals) }
        self.init(field: try c.decode(String.self, forKey: .field), equals: equals)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        switch self.wholeText {
        case .prefix(let p)?: try c.encode(p, forKey: .prefix)
        case .contains(let t)?: try c.encode(t, forKey: .contains)
        case nil: break
        }
        guard self.wholeText == nil else { return }
        try c.encode(self.field, forKey: .field)
        if let equals = self.equals { try c.encode(equals, forKey: .equals) }
    }
}
