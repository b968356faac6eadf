/// Codable over `JSONValue`, for the protocol's line and result types: each type's keys are
/// written once (its stored properties, or its `CodingKeys`), and both directions follow them.
///
/// - Keys: property names in snake_case (`messagesIn` is `messages_in`); a `CodingKeys` raw
///   value that is already snake_case stays as it is.
/// - Numbers stay exact: integers become `JSONNumber`s of their digits, and `JSONValue` and
///   `JSONNumber` fields pass through untouched.
/// - `nil` is written as `null`, except in an `@OmitNil` property, which is left out.
/// - Reading is strict about types and lenient about absence: a key of the wrong type is an
///   error that names where it is (`queue.max_bytes: expected a number, found "x"`); a key that
///   is missing reads as zero, false, empty or nil (a daemon of another version may not send
///   it).
public enum JSONValueCoding {
    public static func encode(_ value: some Encodable) -> JSONValue {
        let node = EncodingNode()
        do {
            try node.encode(value, codingPath: [])
        } catch {
            // Every protocol type encodes; a failure is a bug in one.
            preconditionFailure("cannot encode \(type(of: value)): \(error)")
        }
        return node.json
    }

    public static func decode<T: Decodable>(_ type: T.Type, from json: JSONValue) throws(JSONValueDecodingError) -> T {
        do {
            return try JSONValueDecoder(json, codingPath: []).decodeValue(T.self)
        } catch let error as JSONValueDecodingError {
            throw error
        } catch let error as DecodingError {
            switch error {
            case .dataCorrupted(let c), .typeMismatch(_, let c), .valueNotFound(_, let c), .keyNotFound(_, let c):
                throw JSONValueDecodingError.at(c.codingPath, c.debugDescription)
            @unknown default:
                throw JSONValueDecodingError(path: "", problem: "\(error)")
            }
        } catch {
            throw JSONValueDecodingError(path: "", problem: "\(error)")
        }
    }

    /// `maxMessages` → `max_messages`. A name with no capital (every `CodingKeys` raw value
    /// already in snake_case, most property names) is returned as it is, without a copy: this
    /// runs for every key of every line.
    static func snakeCase(_ name: String) -> String {
        var name = name
        let capital = name.withUTF8 { bytes in bytes.contains { $0 &- UInt8(ascii: "A") < 26 } }
        guard capital else { return name }
        var out: [UInt8] = []
        out.reserveCapacity(name.utf8.count + 4)
        for byte in name.utf8 {
            if byte &- UInt8(ascii: "A") < 26 {
                if !out.isEmpty { out.append(UInt8(ascii: "_")) }
                out.append(byte + 32)
            } else {
                out.append(byte)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// A line or result whose one shape is its Codable conformance: `json` writes it through
/// `JSONValueCoding` (written once here, not in every type).
public protocol JSONValueEncodable: Encodable {}

extension JSONValueEncodable {
    @inlinable public var json: JSONValue { JSONValueCoding.encode(self) }
}

/// A result read back the same way: `init(json:)`. (The server lines read themselves with a
/// failable `init?(json:)` that checks their `type` first, for `ServerLine.decode`.)
public protocol JSONValueCodable: JSONValueEncodable, Codable {}

extension JSONValueCodable {
    @inlinable public init(json: JSONValue) throws(JSONValueDecodingError) {
        self = try JSONValueCoding.decode(Self.self, from: json)
    }
}

/// A line or result that does not read as its type, and where.
public struct JSONValueDecodingError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Dotted path of the key (`queue.spool.fsyncs`, `keys.0.holders`); empty for the top.
    public var path: String
    public var problem: String
    /// When the value is of another type than its key's: what it must be, and what came (a
    /// request's error reply words it for the client: `ProtocolError.init(_:id:)`).
    public var mismatch: Mismatch?

    public struct Mismatch: Sendable, Equatable {
        public var expected: Expected
        public var found: JSONValue
    }

    /// What a key holds.
    public enum Expected: Sendable, Equatable, CustomStringConvertible {
        case string, bool, number, object, array
        /// `range`: `>= 0`, or `from MIN to MAX`.
        case wholeNumber(range: String)

        public var description: String {
            switch self {
            case .string: "a string"
            case .bool: "true or false"
            case .number: "a number"
            case .object: "an object"
            case .array: "an array"
            case .wholeNumber(let range): "a whole number \(range)"
            }
        }
    }

    public init(path: String, problem: String, mismatch: Mismatch? = nil) {
        self.path = path
        self.problem = problem
        self.mismatch = mismatch
    }

    public var description: String { self.path.isEmpty ? self.problem : "\(self.path): \(self.problem)" }

    static func path(_ codingPath: [any CodingKey]) -> String {
        codingPath.map { $0.intValue.map(String.init) ?? JSONValueCoding.snakeCase($0.stringValue) }.joined(separator: ".")
    }

    static func at(_ codingPath: [any CodingKey], _ problem: String) -> Self {
        Self(path: Self.path(codingPath), problem: problem)
    }

    /// `expected a string, found 5`.
    static func mismatch(_ codingPath: [any CodingKey], expected: Expected, found: JSONValue) -> Self {
        Self(
            path: Self.path(codingPath), problem: "expected \(expected), found \(JSONValueDecoder.describe(found))",
            mismatch: Mismatch(expected: expected, found: found))
    }
}

/// An optional property that is left out of the object when nil (instead of written as null).
@propertyWrapper
public struct OmitNil<Value: Codable & Sendable & Equatable>: Codable, Sendable, Equatable {
    public var wrappedValue: Value?

    public init(wrappedValue: Value?) {
        self.wrappedValue = wrappedValue
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        self.wrappedValue = container.decodeNil() ? nil : try container.decode(Value.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(self.wrappedValue)
    }
}

extension KeyedEncodingContainer {
    /// A nil `@OmitNil` property is left out (chosen at compile time for the synthesized
    /// `encode(to:)`, so no coder tests each field's type for it).
    public mutating func encode<Value>(_ value: OmitNil<Value>, forKey key: Key) throws {
        guard let wrapped = value.wrappedValue else { return }
        try self.encode(wrapped, forKey: key)
    }
}

extension KeyedDecodingContainer {
    /// A missing key reads as nil; so does null, except for a `JSONValue` (where it is `.null`).
    public func decode<Value>(_ type: OmitNil<Value>.Type, forKey key: Key) throws -> OmitNil<Value> {
        guard self.contains(key) else { return OmitNil(wrappedValue: nil) }
        if Value.self != JSONValue.self, try self.decodeNil(forKey: key) { return OmitNil(wrappedValue: nil) }
        return OmitNil(wrappedValue: try self.decode(Value.self, forKey: key))
    }
}

/// A struct property whose fields are written in the enclosing object, not under its own key:
/// a part of a reply that one owner keeps (the link's traffic counters in `status`) is its own
/// type, and the wire stays flat. In `JSONValueCoding`, `superEncoder()` and `superDecoder()` are the
/// enclosing object itself.
@propertyWrapper
public struct Flattened<Value: Codable & Sendable & Equatable>: Codable, Sendable, Equatable {
    public var wrappedValue: Value

    public init(wrappedValue: Value) {
        self.wrappedValue = wrappedValue
    }

    public init(from decoder: any Decoder) throws {
        self.wrappedValue = try Value(from: decoder)
    }

    public func encode(to encoder: any Encoder) throws {
        try self.wrappedValue.encode(to: encoder)
    }
}

extension KeyedEncodingContainer {
    /// A `@Flattened` property's fields go into this object (chosen at compile time for the
    /// synthesized `encode(to:)`).
    public mutating func encode<Value>(_ value: Flattened<Value>, forKey key: Key) throws {
        try value.wrappedValue.encode(to: self.superEncoder())
    }
}

extension KeyedDecodingContainer {
    /// A `@Flattened` property reads its fields from this object.
    public func decode<Value>(_ type: Flattened<Value>.Type, forKey key: Key) throws -> Flattened<Value> {
        Flattened(wrappedValue: try Value(from: self.superDecoder()))
    }
}
