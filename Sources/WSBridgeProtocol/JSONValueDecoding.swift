/// The decoding half of `JSONValueCoding`: `JSONValue` to Decodable values, and `JSONValue` and
/// `JSONNumber` as fields of any coder.

// MARK: - Decoding

struct JSONValueDecoder: Decoder {
    /// nil: the key is missing (its value reads as zero, false, empty or nil).
    let value: JSONValue?
    /// The path to the container this value is in, and its key there: the whole path is made
    /// only when asked for (an error, a nested container), not for every field read.
    let parentPath: [any CodingKey]
    let key: (any CodingKey)?
    var codingPath: [any CodingKey] { self.key.map { self.parentPath + [$0] } ?? self.parentPath }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(_ value: JSONValue?, codingPath: [any CodingKey]) {
        self.value = value
        self.parentPath = codingPath
        self.key = nil
    }

    init(_ value: JSONValue?, in parentPath: [any CodingKey], at key: any CodingKey) {
        self.value = value
        self.parentPath = parentPath
        self.key = key
    }

    func fail(_ problem: String) -> JSONValueDecodingError {
        JSONValueDecodingError.at(self.codingPath, problem)
    }

    func mismatch(_ expected: JSONValueDecodingError.Expected, _ found: JSONValue) -> JSONValueDecodingError {
        JSONValueDecodingError.mismatch(self.codingPath, expected: expected, found: found)
    }

    // One check per primitive: `decodeValue` and the keyed reader's own reads both use them.

    func string(_ value: JSONValue) throws(JSONValueDecodingError) -> String {
        guard case .string(let s) = value else { throw self.mismatch(.string, value) }
        return s
    }

    func bool(_ value: JSONValue) throws(JSONValueDecodingError) -> Bool {
        guard case .bool(let b) = value else { throw self.mismatch(.bool, value) }
        return b
    }

    func number(_ value: JSONValue) throws(JSONValueDecodingError) -> JSONNumber {
        guard case .number(let n) = value else { throw self.mismatch(.number, value) }
        return n
    }

    /// A whole number that fits `I`, exactly (no rounding of `1.5` or `1e30`).
    func exact<I: FixedWidthInteger>(_: I.Type, _ value: JSONValue) throws(JSONValueDecodingError) -> I {
        guard case .number(let n) = value, let i = I(n.text) else {
            throw self.mismatch(.wholeNumber(range: I.min == 0 && I.bitWidth >= 64 ? ">= 0" : "from \(I.min) to \(I.max)"), value)
        }
        return i
    }

    static func describe(_ value: JSONValue) -> String {
        let text = value.serialized
        return text.count > 40 ? String(text.prefix(40)) + "…" : text
    }

    /// Primitives are told by their type's identity (a cast per candidate type would cost more
    /// than the rest of a request's decoding).
    func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
        func be<U>(_ value: U) -> T { unsafeBitCast(value, to: T.self) }
        let kind = ObjectIdentifier(T.self)
        if kind == ObjectIdentifier(JSONValue.self) { return be(self.value ?? .null) }
        guard let value = self.value, value != .null else {
            if let zero = Self.zero(T.self) { return zero }
            return try T(from: self)
        }
        switch kind {
        case ObjectIdentifier(String.self): return be(try self.string(value))
        case ObjectIdentifier(Bool.self): return be(try self.bool(value))
        case ObjectIdentifier(JSONNumber.self): return be(try self.number(value))
        case ObjectIdentifier(Double.self): return be(try self.number(value).doubleValue)
        default:
            if let integer = try self.integer(T.self, value) { return integer }
            return try T(from: self)
        }
    }

    /// What a missing (or null) primitive reads as.
    static func zero<T>(_ type: T.Type) -> T? {
        func be<U>(_ value: U) -> T { unsafeBitCast(value, to: T.self) }
        switch ObjectIdentifier(type) {
        case ObjectIdentifier(String.self): return be("")
        case ObjectIdentifier(Bool.self): return be(false)
        case ObjectIdentifier(Int.self): return be(0 as Int)
        case ObjectIdentifier(Int64.self): return be(0 as Int64)
        case ObjectIdentifier(Int32.self): return be(0 as Int32)
        case ObjectIdentifier(UInt64.self): return be(0 as UInt64)
        case ObjectIdentifier(UInt32.self): return be(0 as UInt32)
        case ObjectIdentifier(UInt16.self): return be(0 as UInt16)
        case ObjectIdentifier(UInt8.self): return be(0 as UInt8)
        case ObjectIdentifier(Double.self): return be(0.0)
        case ObjectIdentifier(JSONNumber.self): return be(JSONNumber(0))
        default: return nil
        }
    }

    func integer<T>(_ type: T.Type, _ value: JSONValue) throws -> T? {
        func exact<I: FixedWidthInteger>(_: I.Type) throws -> T { unsafeBitCast(try self.exact(I.self, value), to: T.self) }
        switch ObjectIdentifier(type) {
        case ObjectIdentifier(Int.self): return try exact(Int.self)
        case ObjectIdentifier(Int64.self): return try exact(Int64.self)
        case ObjectIdentifier(Int32.self): return try exact(Int32.self)
        case ObjectIdentifier(UInt64.self): return try exact(UInt64.self)
        case ObjectIdentifier(UInt32.self): return try exact(UInt32.self)
        case ObjectIdentifier(UInt16.self): return try exact(UInt16.self)
        case ObjectIdentifier(UInt8.self): return try exact(UInt8.self)
        default: return nil
        }
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        switch self.value {
        case nil, .null?: return KeyedDecodingContainer(KeyedReader<Key>(fields: [], codingPath: self.codingPath))
        case .object(let fields)?: return KeyedDecodingContainer(KeyedReader<Key>(fields: fields, codingPath: self.codingPath))
        case let other?: throw self.mismatch(.object, other)
        }
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        switch self.value {
        case nil, .null?: return UnkeyedReader(items: [], codingPath: self.codingPath)
        case .array(let items)?: return UnkeyedReader(items: items, codingPath: self.codingPath)
        case let other?: throw self.mismatch(.array, other)
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
        let name = JSONValueCoding.snakeCase(key.stringValue)
        return self.fields.last { $0.0 == name }?.1
    }

    private func decoder(_ key: Key) -> JSONValueDecoder { JSONValueDecoder(self.lookup(key), in: self.codingPath, at: key) }

    func contains(_ key: Key) -> Bool { self.lookup(key) != nil }

    func decodeNil(forKey key: Key) throws -> Bool {
        let value = self.lookup(key)
        return value == nil || value == .null
    }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try self.decoder(key).decodeValue(T.self)
    }

    /// Missing or null is nil, with one look for the key (the default looks three times).
    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        guard let value = self.lookup(key), value != .null else { return nil }
        return try JSONValueDecoder(value, in: self.codingPath, at: key).decodeValue(T.self)
    }
    // The primitives' own: no generic `T?` whose metadata the unspecialized container would
    // look up at run time for every field.
    func decodeIfPresent(_ type: String.Type, forKey key: Key) throws -> String? {
        try self.present(key).map { value, decoder in try decoder.string(value) }
    }
    func decodeIfPresent(_ type: Bool.Type, forKey key: Key) throws -> Bool? {
        try self.present(key).map { value, decoder in try decoder.bool(value) }
    }
    func decodeIfPresent(_ type: Double.Type, forKey key: Key) throws -> Double? {
        try self.present(key).map { value, decoder in try decoder.number(value).doubleValue }
    }
    func decodeIfPresent(_ type: UInt64.Type, forKey key: Key) throws -> UInt64? {
        try self.present(key).map { value, decoder in try decoder.exact(UInt64.self, value) }
    }

    /// The key's value unless it is missing or null, with the decoder that reads it.
    private func present(_ key: Key) -> (JSONValue, JSONValueDecoder)? {
        guard let value = self.lookup(key), value != .null else { return nil }
        return (value, JSONValueDecoder(value, in: self.codingPath, at: key))
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try self.decoder(key).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try self.decoder(key).unkeyedContainer()
    }

    /// This object itself: `@Flattened` reads a part's fields here.
    func superDecoder() throws -> any Decoder { JSONValueDecoder(.object(self.fields), codingPath: self.codingPath) }
    func superDecoder(forKey key: Key) throws -> any Decoder { self.decoder(key) }
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

    private mutating func next() -> JSONValueDecoder {
        defer { self.currentIndex += 1 }
        let value = self.currentIndex < self.items.count ? self.items[self.currentIndex] : nil
        return JSONValueDecoder(value, in: self.codingPath, at: JSONValueIndex(self.currentIndex))
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
    let decoder: JSONValueDecoder
    var codingPath: [any CodingKey] { self.decoder.codingPath }

    func decodeNil() -> Bool { self.decoder.value == nil || self.decoder.value == .null }

    func decode<T: Decodable>(_ type: T.Type) throws -> T { try self.decoder.decodeValue(T.self) }
}

// MARK: - JSONValue and JSONNumber as fields

/// A `JSONValue` field is kept as it is by `JSONValueCoding` (exact numbers, key order). Through any
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
            throw EncodingError.invalidValue(self, .init(codingPath: c.codingPath, debugDescription: "an object field needs JSONValueCoding"))
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
