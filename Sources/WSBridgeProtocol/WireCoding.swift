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
public enum WireCoding {
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

    public static func decode<T: Decodable>(_ type: T.Type, from json: JSONValue) throws(WireDecodingError) -> T {
        do {
            return try WireDecoder(json, codingPath: []).decodeValue(T.self)
        } catch let error as WireDecodingError {
            throw error
        } catch let error as DecodingError {
            switch error {
            case .dataCorrupted(let c), .typeMismatch(_, let c), .valueNotFound(_, let c), .keyNotFound(_, let c):
                throw WireDecodingError.at(c.codingPath, c.debugDescription)
            @unknown default:
                throw WireDecodingError(path: "", problem: "\(error)")
            }
        } catch {
            throw WireDecodingError(path: "", problem: "\(error)")
        }
    }

    /// `maxMessages` → `max_messages`.
    static func snakeCase(_ name: String) -> String {
        var out = ""
        for c in name {
            if c.isUppercase {
                if !out.isEmpty { out.append("_") }
                out.append(contentsOf: c.lowercased())
            } else {
                out.append(c)
            }
        }
        return out
    }
}

/// A line or result that does not read as its type, and where.
public struct WireDecodingError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Dotted path of the key (`queue.spool.fsyncs`, `keys.0.holders`); empty for the top.
    public var path: String
    public var problem: String

    public var description: String { self.path.isEmpty ? self.problem : "\(self.path): \(self.problem)" }

    static func at(_ codingPath: [any CodingKey], _ problem: String) -> Self {
        Self(path: codingPath.map { $0.intValue.map(String.init) ?? WireCoding.snakeCase($0.stringValue) }.joined(separator: "."), problem: problem)
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

protocol OmittableWhenNil {
    var isNil: Bool { get }
}

extension OmitNil: OmittableWhenNil {
    var isNil: Bool { self.wrappedValue == nil }
}

extension KeyedDecodingContainer {
    /// A missing key reads as nil; so does null, except for a `JSONValue` (where it is `.null`).
    public func decode<Value>(_ type: OmitNil<Value>.Type, forKey key: Key) throws -> OmitNil<Value> {
        guard self.contains(key) else { return OmitNil(wrappedValue: nil) }
        if Value.self != JSONValue.self, try self.decodeNil(forKey: key) { return OmitNil(wrappedValue: nil) }
        return OmitNil(wrappedValue: try self.decode(Value.self, forKey: key))
    }
}

// MARK: - Encoding

/// One value being encoded; containers fill it in and `json` reads it out.
private final class EncodingNode {
    enum Content {
        case unset
        case value(JSONValue)
        case object([(String, EncodingNode)])
        case array([EncodingNode])
    }

    var content = Content.unset

    var json: JSONValue {
        switch self.content {
        case .unset: .null
        case .value(let v): v
        case .object(let fields): .object(fields.map { ($0.0, $0.1.json) })
        case .array(let items): .array(items.map(\.json))
        }
    }

    func encode(_ value: some Encodable, codingPath: [any CodingKey]) throws {
        if let json = Self.primitive(value) {
            self.content = .value(json)
        } else {
            try value.encode(to: WireEncoder(node: self, codingPath: codingPath))
        }
    }

    static func primitive(_ value: Any) -> JSONValue? {
        switch value {
        case let v as JSONValue: v
        case let v as JSONNumber: .number(v)
        case let v as String: .string(v)
        case let v as Bool: .bool(v)
        case let v as Int: .number(JSONNumber(v))
        case let v as Int64: .number(JSONNumber(v))
        case let v as Int32: .number(JSONNumber(v))
        case let v as UInt64: .number(JSONNumber(v))
        case let v as UInt32: .number(JSONNumber(v))
        case let v as UInt16: .number(JSONNumber(v))
        case let v as UInt8: .number(JSONNumber(v))
        case let v as Double: .number(JSONNumber(v))
        default: nil
        }
    }
}

private struct WireEncoder: Encoder {
    let node: EncodingNode
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if case .object = self.node.content {} else { self.node.content = .object([]) }
        return KeyedEncodingContainer(KeyedContainer<Key>(node: self.node, codingPath: self.codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if case .array = self.node.content {} else { self.node.content = .array([]) }
        return UnkeyedContainer(node: self.node, codingPath: self.codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        SingleValueContainer(node: self.node, codingPath: self.codingPath)
    }
}

private struct KeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let node: EncodingNode
    let codingPath: [any CodingKey]

    private func append(_ key: Key, _ child: EncodingNode) {
        guard case .object(var fields) = self.node.content else { return }
        fields.append((WireCoding.snakeCase(key.stringValue), child))
        self.node.content = .object(fields)
    }

    mutating func encodeNil(forKey key: Key) throws {
        let child = EncodingNode()
        child.content = .value(.null)
        self.append(key, child)
    }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        if let omittable = value as? any OmittableWhenNil, omittable.isNil { return }
        let child = EncodingNode()
        try child.encode(value, codingPath: self.codingPath + [key])
        self.append(key, child)
    }

    // Optionals are written as null, not left out (the synthesized code calls these).
    mutating func encodeIfPresent<T: Encodable>(_ value: T?, forKey key: Key) throws {
        if let value { try self.encode(value, forKey: key) } else { try self.encodeNil(forKey: key) }
    }
    mutating func encodeIfPresent(_ value: Bool?, forKey key: Key) throws { try self.encodeIfPresent(value as Bool??, key) }
    mutating func encodeIfPresent(_ value: String?, forKey key: Key) throws { try self.encodeIfPresent(value as String??, key) }
    mutating func encodeIfPresent(_ value: Double?, forKey key: Key) throws { try self.encodeIfPresent(value as Double??, key) }
    mutating func encodeIfPresent(_ value: Int?, forKey key: Key) throws { try self.encodeIfPresent(value as Int??, key) }
    mutating func encodeIfPresent(_ value: Int32?, forKey key: Key) throws { try self.encodeIfPresent(value as Int32??, key) }
    mutating func encodeIfPresent(_ value: Int64?, forKey key: Key) throws { try self.encodeIfPresent(value as Int64??, key) }
    mutating func encodeIfPresent(_ value: UInt16?, forKey key: Key) throws { try self.encodeIfPresent(value as UInt16??, key) }
    mutating func encodeIfPresent(_ value: UInt32?, forKey key: Key) throws { try self.encodeIfPresent(value as UInt32??, key) }
    mutating func encodeIfPresent(_ value: UInt64?, forKey key: Key) throws { try self.encodeIfPresent(value as UInt64??, key) }

    private mutating func encodeIfPresent<T: Encodable>(_ value: T??, _ key: Key) throws {
        if let value = value ?? nil { try self.encode(value, forKey: key) } else { try self.encodeNil(forKey: key) }
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        let child = EncodingNode()
        self.append(key, child)
        return WireEncoder(node: child, codingPath: self.codingPath + [key]).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let child = EncodingNode()
        self.append(key, child)
        return WireEncoder(node: child, codingPath: self.codingPath + [key]).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder { WireEncoder(node: self.node, codingPath: self.codingPath) }
    mutating func superEncoder(forKey key: Key) -> any Encoder { WireEncoder(node: self.node, codingPath: self.codingPath) }
}

private struct UnkeyedContainer: UnkeyedEncodingContainer {
    let node: EncodingNode
    let codingPath: [any CodingKey]

    var count: Int {
        if case .array(let items) = self.node.content { return items.count }
        return 0
    }

    private func append(_ child: EncodingNode) {
        guard case .array(var items) = self.node.content else { return }
        items.append(child)
        self.node.content = .array(items)
    }

    mutating func encodeNil() throws {
        let child = EncodingNode()
        child.content = .value(.null)
        self.append(child)
    }

    mutating func encode<T: Encodable>(_ value: T) throws {
        let child = EncodingNode()
        try child.encode(value, codingPath: self.codingPath + [WireIndex(self.count)])
        self.append(child)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        let child = EncodingNode()
        self.append(child)
        return WireEncoder(node: child, codingPath: self.codingPath).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let child = EncodingNode()
        self.append(child)
        return WireEncoder(node: child, codingPath: self.codingPath).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder { WireEncoder(node: self.node, codingPath: self.codingPath) }
}

private struct SingleValueContainer: SingleValueEncodingContainer {
    let node: EncodingNode
    let codingPath: [any CodingKey]

    mutating func encodeNil() throws { self.node.content = .value(.null) }

    mutating func encode<T: Encodable>(_ value: T) throws {
        try self.node.encode(value, codingPath: self.codingPath)
    }
}

private struct WireIndex: CodingKey {
    var intValue: Int?
    var stringValue: String { "\(self.intValue ?? 0)" }
    init(_ index: Int) { self.intValue = index }
    init?(stringValue: String) { nil }
    init?(intValue: Int) { self.intValue = intValue }
}

// MARK: - Decoding

private struct WireDecoder: Decoder {
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
