/// The decoding half of `WireCoding`: `JSONValue` to Decodable values, and `JSONValue` and
/// `JSONNumber` as fields of any coder.

// MARK: - Decoding

struct WireDecoder: Decoder {
    /// nil: the key is missing (its value reads as zero, false, empty or nil).
    let value: JSONValue?
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(_ value: JSONValue?, codingPath: [any CodingKey]) {
        self.value = value
        self.codingPath = codingPath
    }

    func fail(_ problem: String) -> WireDecodingError {
        WireDecodingError.at(self.codingPath, problem)
    }

    static func describe(_ value: JSONValue) -> String {
        let text = value.serialized
        return text.count > 40 ? String(text.prefix(40)) + "…" : text
    }

    func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
        if T.self == JSONValue.self { return (self.value ?? .null) as! T }
        guard let value = self.value, value != .null else {
            if let zero = Self.zero(T.self) { return zero }
            return try T(from: self)
        }
        switch T.self {
        case is String.Type:
            guard let s = value.stringValue else { throw self.fail("expected a string, found \(Self.describe(value))") }
            return s as! T
        case is Bool.Type:
            guard let b = value.boolValue else { throw self.fail("expected true or false, found \(Self.describe(value))") }
            return b as! T
        case is JSONNumber.Type:
            guard case .number(let n) = value else { throw self.fail("expected a number, found \(Self.describe(value))") }
            return n as! T
        case is Double.Type:
            guard case .number(let n) = value else { throw self.fail("expected a number, found \(Self.describe(value))") }
            return n.doubleValue as! T
        default:
            if let integer = try self.integer(T.self, value) { return integer }
            return try T(from: self)
        }
    }

    /// What a missing (or null) primitive reads as.
    static func zero<T>(_ type: T.Type) -> T? {
        switch type {
        case is String.Type: "" as? T
        case is Bool.Type: false as? T
        case is Int.Type: 0 as? T
        case is Int64.Type: Int64(0) as? T
        case is Int32.Type: Int32(0) as? T
        case is UInt64.Type: UInt64(0) as? T
        case is UInt32.Type: UInt32(0) as? T
        case is UInt16.Type: UInt16(0) as? T
        case is UInt8.Type: UInt8(0) as? T
        case is Double.Type: 0.0 as? T
        case is JSONNumber.Type: JSONNumber(0) as? T
        default: nil
        }
    }

    func integer<T>(_ type: T.Type, _ value: JSONValue) throws -> T? {
        func exact<I: FixedWidthInteger>(_: I.Type) throws -> I {
            guard case .number(let n) = value, let i = I(n.text) else {
                throw self.fail("expected a whole number from \(I.min) to \(I.max), found \(Self.describe(value))")
            }
            return i
        }
        switch type {
        case is Int.Type: return try exact(Int.self) as? T
        case is Int64.Type: return try exact(Int64.self) as? T
        case is Int32.Type: return try exact(Int32.self) as? T
        case is UInt64.Type: return try exact(UInt64.self) as? T
        case is UInt32.Type: return try exact(UInt32.self) as? T
        case is UInt16.Type: return try exact(UInt16.self) as? T
        case is UInt8.Type: return try exact(UInt8.self) as? T
        default: return nil
        }
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        switch self.value {
        case nil, .null?: return KeyedDecodingContainer(KeyedReader<Key>(fields: [], codingPath: self.codingPath))
        case .object(let fields)?: return KeyedDecodingContainer(KeyedReader<Key>(fields: fields, codingPath: self.codingPath))
        case let other?: throw self.fail("expected an object, found \(Self.describe(other))")
        }
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        switch self.value {
        case nil, .null?: return UnkeyedReader(items: [], codingPath: self.codingPath)
        case .array(let items)?: return UnkeyedReader(items: items, codingPath: self.codingPath)
        case let other?: throw self.fail("expected an array, found \(Self.describe(other))")
        }
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        SingleValueReader(decoder: self)
    }
}

private struct KeyedReader<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let fields: [(String, JSONValue)]
    let codingPath: [any CodingKey]

    var allKeys: [Key] { self.fields.compactMap { name, _ in Key(stringValue: name) } }

    /// The last value given for the key (as `JSONValue`'s subscript reads it).
    private func lookup(_ key: Key) -> JSONValue? {
        let name = WireCoding.snakeCase(key.stringValue)
        return self.fields.last { $0.0 == name }?.1
    }

    func contains(_ key: Key) -> Bool { self.lookup(key) != nil }

    func decodeNil(forKey key: Key) throws -> Bool {
        let value = self.lookup(key)
        return value == nil || value == .null
    }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try WireDecoder(self.lookup(key), codingPath: self.codingPath + [key]).decodeValue(T.self)
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try WireDecoder(self.lookup(key), codingPath: self.codingPath + [key]).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try WireDecoder(self.lookup(key), codingPath: self.codingPath + [key]).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder { WireDecoder(.object(self.fields), codingPath: self.codingPath) }
    func superDecoder(forKey key: Key) throws -> any Decoder { WireDecoder(self.lookup(key), codingPath: self.codingPath + [key]) }
}

private struct UnkeyedReader: UnkeyedDecodingContainer {
    let items: [JSONValue]
    let codingPath: [any CodingKey]
    var currentIndex = 0

    init(items: [JSONValue], codingPath: [any CodingKey]) {
        self.items = items
        self.codingPath = codingPath
    }

    var count: Int? { self.items.count }
    var isAtEnd: Bool { self.currentIndex >= self.items.count }

    private mutating func next() -> WireDecoder {
        defer { self.currentIndex += 1 }
        let value = self.currentIndex < self.items.count ? self.items[self.currentIndex] : nil
        return WireDecoder(value, codingPath: self.codingPath + [WireIndex(self.currentIndex)])
    }

    mutating func decodeNil() throws -> Bool {
        guard !self.isAtEnd, self.items[self.currentIndex] == .null else { return false }
        self.currentIndex += 1
        return true
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try self.next().decodeValue(T.self) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try self.next().container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer { try self.next().unkeyedContainer() }

    mutating func superDecoder() throws -> any Decoder { self.next() }
}

private struct SingleValueReader: SingleValueDecodingContainer {
    let decoder: WireDecoder
    var codingPath: [any CodingKey] { self.decoder.codingPath }

    func decodeNil() -> Bool { self.decoder.value == nil || self.decoder.value == .null }

    func decode<T: Decodable>(_ type: T.Type) throws -> T { try self.decoder.decodeValue(T.self) }
}

// MARK: - JSONValue and JSONNumber as fields

/// A `JSONValue` field is kept as it is by `WireCoding` (exact numbers, key order). Through any
/// other coder it goes as the closest plain value.
extension JSONValue: Codable {
    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() {
            self = .null
        } else if let b = try? c.decode(Bool.self) {
            self = .bool(b)
        } else if let n = try? c.decode(JSONNumber.self) {
            self = .number(n)
        } else if let s = try? c.decode(String.self) {
            self = .string(s)
        } else if let a = try? c.decode([JSONValue].self) {
            self = .array(a)
        } else {
            throw DecodingError.dataCorruptedError(in: c, debugDescription: "not a JSON value this decoder can give")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .null: try c.encodeNil()
        case .bool(let b): try c.encode(b)
        case .number(let n): try c.encode(n)
        case .string(let s): try c.encode(s)
        case .array(let a): try c.encode(a)
        case .object:
            throw EncodingError.invalidValue(self, .init(codingPath: c.codingPath, debugDescription: "an object field needs WireCoding"))
        }
    }
}

extension JSONNumber: Codable {
    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        guard let n = JSONNumber(String(try c.decode(Double.self))) else {
            throw DecodingError.dataCorruptedError(in: c, debugDescription: "not a number")
        }
        self = n
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(self.doubleValue)
    }
}
