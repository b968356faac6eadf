/// The encoding half of `JSONValueCoding`: Encodable values to `JSONValue`.

// MARK: - Encoding

/// One value being encoded; containers fill it in and `json` reads it out. The fields and
/// items are its own arrays, appended to in place (an array inside an enum case would be
/// copied on every append).
final class EncodingNode {
    enum Shape {
        case value, object, array
    }

    private(set) var shape = Shape.value
    var value = JSONValue.null
    var fields: [(String, EncodingNode)] = []
    var items: [EncodingNode] = []

    var json: JSONValue {
        switch self.shape {
        case .value: self.value
        case .object: .object(self.fields.map { ($0.0, $0.1.json) })
        case .array: .array(self.items.map(\.json))
        }
    }

    /// Makes this node an object or an array (keeping what it holds when it is one already).
    func become(_ shape: Shape) {
        guard self.shape != shape else { return }
        self.shape = shape
        self.fields = []
        self.items = []
    }

    func encode(_ value: some Encodable, codingPath: [any CodingKey]) throws {
        if let json = Self.primitive(value) {
            self.become(.value)
            self.value = json
        } else {
            try value.encode(to: JSONValueEncoder(node: self, codingPath: codingPath))
        }
    }

    /// The value when it is one of JSON's own: told by its type's identity, not by casts from
    /// `Any` (a cast per candidate type cost more than the rest of a line's encoding).
    static func primitive<T>(_ value: T) -> JSONValue? {
        func be<U>(_: U.Type) -> U { unsafeBitCast(value, to: U.self) }
        switch ObjectIdentifier(T.self) {
        case ObjectIdentifier(JSONValue.self): return be(JSONValue.self)
        case ObjectIdentifier(JSONNumber.self): return .number(be(JSONNumber.self))
        case ObjectIdentifier(String.self): return .string(be(String.self))
        case ObjectIdentifier(Bool.self): return .bool(be(Bool.self))
        case ObjectIdentifier(Int.self): return .number(JSONNumber(be(Int.self)))
        case ObjectIdentifier(Int64.self): return .number(JSONNumber(be(Int64.self)))
        case ObjectIdentifier(Int32.self): return .number(JSONNumber(be(Int32.self)))
        case ObjectIdentifier(UInt64.self): return .number(JSONNumber(be(UInt64.self)))
        case ObjectIdentifier(UInt32.self): return .number(JSONNumber(be(UInt32.self)))
        case ObjectIdentifier(UInt16.self): return .number(JSONNumber(be(UInt16.self)))
        case ObjectIdentifier(UInt8.self): return .number(JSONNumber(be(UInt8.self)))
        case ObjectIdentifier(Double.self): return .number(JSONNumber(be(Double.self)))
        default: return nil
        }
    }
}

private struct JSONValueEncoder: Encoder {
    let node: EncodingNode
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        self.node.become(.object)
        return KeyedEncodingContainer(KeyedContainer<Key>(node: self.node, codingPath: self.codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        self.node.become(.array)
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
        self.node.fields.append((JSONValueCoding.snakeCase(key.stringValue), child))
    }

    mutating func encodeNil(forKey key: Key) throws {
        let child = EncodingNode()
        child.value = .null
        self.append(key, child)
    }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
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
        return JSONValueEncoder(node: child, codingPath: self.codingPath + [key]).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let child = EncodingNode()
        self.append(key, child)
        return JSONValueEncoder(node: child, codingPath: self.codingPath + [key]).unkeyedContainer()
    }

    /// This object itself: `@Flattened` writes a part's fields here.
    mutating func superEncoder() -> any Encoder { JSONValueEncoder(node: self.node, codingPath: self.codingPath) }
    mutating func superEncoder(forKey key: Key) -> any Encoder {
        let child = EncodingNode()
        self.append(key, child)
        return JSONValueEncoder(node: child, codingPath: self.codingPath + [key])
    }
}

private struct UnkeyedContainer: UnkeyedEncodingContainer {
    let node: EncodingNode
    let codingPath: [any CodingKey]

    var count: Int {
        self.node.items.count
    }

    private func append(_ child: EncodingNode) {
        self.node.items.append(child)
    }

    mutating func encodeNil() throws {
        let child = EncodingNode()
        child.value = .null
        self.append(child)
    }

    mutating func encode<T: Encodable>(_ value: T) throws {
        let child = EncodingNode()
        try child.encode(value, codingPath: self.codingPath + [JSONValueIndex(self.count)])
        self.append(child)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        let child = EncodingNode()
        self.append(child)
        return JSONValueEncoder(node: child, codingPath: self.codingPath).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let child = EncodingNode()
        self.append(child)
        return JSONValueEncoder(node: child, codingPath: self.codingPath).unkeyedContainer()
    }

    /// The next item, as `superDecoder()` reads it.
    mutating func superEncoder() -> any Encoder {
        let child = EncodingNode()
        self.append(child)
        return JSONValueEncoder(node: child, codingPath: self.codingPath + [JSONValueIndex(self.count - 1)])
    }
}

private struct SingleValueContainer: SingleValueEncodingContainer {
    let node: EncodingNode
    let codingPath: [any CodingKey]

    mutating func encodeNil() throws {
        self.node.become(.value)
        self.node.value = .null
    }

    mutating func encode<T: Encodable>(_ value: T) throws {
        try self.node.encode(value, codingPath: self.codingPath)
    }
}

struct JSONValueIndex: CodingKey {
    var intValue: Int?
    var stringValue: String { "\(self.intValue ?? 0)" }
    init(_ index: Int) { self.intValue = index }
    init?(stringValue: String) { nil }
    init?(intValue: Int) { self.intValue = intValue }
}
