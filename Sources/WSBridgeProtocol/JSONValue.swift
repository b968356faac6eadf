import CWSBridgeBytes

#if canImport(Glibc)
    import Glibc
#endif

/// A JSON value, with a strict parser (RFC 8259) that says where and what went wrong, and a
/// compact serializer. No Foundation: both the daemon and the CLI use it.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    /// Kept as its text: exact, whatever its size or precision.
    case number(JSONNumber)
    case string(String)
    case array([JSONValue])
    /// Keys keep their order; duplicate keys keep the last value on lookup.
    case object([(String, JSONValue)])

    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case (.bool(let a), .bool(let b)): a == b
        case (.number(let a), .number(let b)): a == b
        case (.string(let a), .string(let b)): a == b
        case (.array(let a), .array(let b)): a == b
        case (.object(let a), .object(let b)):
            a.count == b.count && zip(a, b).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        default: false
        }
    }

    /// Whether the two serialize to the same text: numbers compared by their text (`1.0` is not
    /// `1` here) and strings by their bytes (not by Unicode equivalence, as `==` does).
    public func serializesLike(_ other: JSONValue) -> Bool {
        switch (self, other) {
        case (.null, .null): true
        case (.bool(let a), .bool(let b)): a == b
        case (.number(let a), .number(let b)): Self.sameBytes(a.text, b.text)
        case (.string(let a), .string(let b)): Self.sameBytes(a, b)
        case (.array(let a), .array(let b)): a.count == b.count && zip(a, b).allSatisfy { $0.serializesLike($1) }
        case (.object(let a), .object(let b)):
            a.count == b.count && zip(a, b).allSatisfy { Self.sameBytes($0.0, $1.0) && $0.1.serializesLike($1.1) }
        default: false
        }
    }

    /// Whether two strings are the same UTF-8 bytes (one memcmp; `==` would also take the
    /// Unicode equivalents).
    private static func sameBytes(_ a: String, _ b: String) -> Bool {
        guard a.utf8.count == b.utf8.count else { return false }
        var a = a
        var b = b
        return a.withUTF8 { x in b.withUTF8 { y in x.isEmpty || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0 } }
    }

    public subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.last(where: { $0.0 == key })?.1
    }

    /// Follows a dotted path (`data.symbol`, `items.0.id`).
    public func value(at path: String) -> JSONValue? {
        self.value(at: PathComponent.split(path))
    }

    /// Follows a path split beforehand (a filter splits its path once, not for every message).
    public func value(at path: [PathComponent]) -> JSONValue? {
        var current = self
        for component in path {
            switch current {
            case .object:
                guard let next = current[component.key] else { return nil }
                current = next
            case .array(let items):
                guard let i = component.index, items.indices.contains(i) else { return nil }
                current = items[i]
            default:
                return nil
            }
        }
        return current
    }

    /// One part of a dotted path: an object key, which is also an array index when it is a number.
    public struct PathComponent: Sendable, Equatable {
        public var key: String
        public var index: Int?

        public init(_ key: String) {
            self.key = key
            self.index = Int(key)
        }

        public static func split(_ path: String) -> [PathComponent] {
            path.split(separator: ".", omittingEmptySubsequences: false).map { PathComponent(String($0)) }
        }
    }

    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    public var intValue: Int? {
        if case .number(let n) = self { return n.intValue }
        return nil
    }

    public var doubleValue: Double? {
        if case .number(let n) = self { return n.doubleValue }
        return nil
    }

    public var boolValue: Bool? {
        if case .bool(let b) = self { return b }
        return nil
    }

    /// The type's name as a user reads it in an error message.
    public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByDictionaryLiteral, ExpressibleByArrayLiteral, ExpressibleByNilLiteral, ExpressibleByFloatLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .number(JSONNumber(value)) }
    public init(floatLiteral value: Double) { self = .number(JSONNumber(value)) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) { self = .object(elements) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(nilLiteral: ()) { self = .null }
}

// MARK: - Serializing

extension JSONValue {
    /// Compact JSON text (no spaces), as one NDJSON line needs.
    public var serialized: String {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        self.write(into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    public func write(into out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .number(let n): out.append(contentsOf: n.text.utf8)
        case .string(let s): JSONWriter.writeString(s, into: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                item.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (i, (key, value)) in members.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                JSONWriter.writeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                value.write(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }
}

/// Low-level JSON writing, shared with the daemon's hot path (message lines).
public enum JSONWriter {
    public static func writeString(_ s: String, into out: inout [UInt8]) {
        var s = s
        s.withUTF8 { writeString(utf8: UnsafeRawBufferPointer($0), into: &out) }
    }

    /// Writes a JSON string from bytes that are valid UTF-8 (the caller checked): the same one
    /// pass as the daemon's message lines (`escapedCount`, then `writeEscaped`).
    public static func writeString(utf8 bytes: UnsafeRawBufferPointer, into out: inout [UInt8]) {
        // Most strings (every key, most values) have nothing to escape: one scan, one copy.
        if let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), cwsb_json_plain_prefix(base, bytes.count) == bytes.count {
            out.append(UInt8(ascii: "\""))
            out.append(contentsOf: UnsafeBufferPointer(start: base, count: bytes.count))
            out.append(UInt8(ascii: "\""))
            return
        }
        let start = out.count
        let count = Self.escapedCount(utf8: bytes)
        out.append(contentsOf: repeatElement(0, count: count))
        out.withUnsafeMutableBytes { all in
            _ = Self.writeEscaped(utf8: bytes, into: UnsafeMutableRawBufferPointer(rebasing: all[start...]))
        }
    }

    /// Per byte: how many bytes its escape adds (0: written as it is; 1: `\"`, `\\`, `\n`,
    /// `\r`, `\t`; 5: `\u00XX` for the other control characters).
    private static let escapeExtra: [UInt8] = (0..<256).map { c in
        switch c {
        case 0x22, 0x5C, 0x0A, 0x0D, 0x09: 1
        case 0..<0x20: 5
        default: 0
        }
    }

    /// The length of `bytes` written as a JSON string, quotes included (see `writeEscaped`): the
    /// plain runs found sixty-four bytes per step, each escape counted by the table.
    public static func escapedCount(utf8 bytes: UnsafeRawBufferPointer) -> Int {
        guard let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return 2 }
        return Self.escapeExtra.withUnsafeBufferPointer { extra in
            let count = bytes.count
            var n = count + 2
            var i = cwsb_json_plain_prefix(base, count)
            while i < count {
                n &+= Int(extra[Int(base[i])])
                i += 1
                i += cwsb_json_plain_prefix(base + i, count - i)
            }
            return n
        }
    }

    /// Writes `bytes` (valid UTF-8) as a JSON string into `out`, which holds at least
    /// `escapedCount(utf8:)` bytes; returns the bytes written.
    public static func writeEscaped(utf8 bytes: UnsafeRawBufferPointer, into out: UnsafeMutableRawBufferPointer) -> Int {
        Self.writeEscaped(utf8: bytes, ifRoomIn: out)!
    }

    /// Writes `bytes` (valid UTF-8) as a JSON string into `out` if it fits, and returns the
    /// bytes written; nil if it does not (what was written is then garbage). The hot path's
    /// form: the caller gives room to spare, and counts (`escapedCount`) only when it was not
    /// enough, so a message is read once, not twice. Each run of bytes that need no escape is
    /// found sixty-four bytes per step (`cwsb_json_plain_prefix`, SSE2) and copied at once.
    public static func writeEscaped(utf8 bytes: UnsafeRawBufferPointer, ifRoomIn out: UnsafeMutableRawBufferPointer) -> Int? {
        let none = UnsafeRawBufferPointer(start: nil, count: 0)
        return Self.writeEscaped(utf8: bytes, none, none, ifRoomIn: out)
    }

    /// `first`, `second` and `third` (each valid UTF-8) one after another written as one JSON
    /// string, as `writeEscaped(utf8:ifRoomIn:)` writes one (a routed message with its id
    /// replaced: the bytes before the id, the id, the bytes after it).
    public static func writeEscaped(
        utf8 first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer, _ third: UnsafeRawBufferPointer, ifRoomIn out: UnsafeMutableRawBufferPointer
    ) -> Int? {
        guard let dst = out.baseAddress, out.count >= 2 else { return nil }
        // The closing quote's byte is kept free throughout.
        let end = out.count - 1
        dst.storeBytes(of: UInt8(ascii: "\""), toByteOffset: 0, as: UInt8.self)
        var o = 1
        guard Self.appendEscaped(first, to: dst, at: &o, end: end), Self.appendEscaped(second, to: dst, at: &o, end: end),
            Self.appendEscaped(third, to: dst, at: &o, end: end)
        else { return nil }
        dst.storeBytes(of: UInt8(ascii: "\""), toByteOffset: o, as: UInt8.self)
        return o + 1
    }

    /// `bytes` escaped at `dst + o` (`o` moved past them) if they fit before `end`.
    @inline(__always)
    private static func appendEscaped(_ bytes: UnsafeRawBufferPointer, to dst: UnsafeMutableRawPointer, at o: inout Int, end: Int) -> Bool {
        guard let src = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return true }
        return Self.escapeExtra.withUnsafeBufferPointer { extra -> Bool in
            let count = bytes.count
            var i = 0
            while i < count {
                let plain = cwsb_json_plain_prefix(src + i, count - i)
                guard o + plain <= end else { return false }
                (dst + o).copyMemory(from: src + i, byteCount: plain)
                o += plain
                i += plain
                guard i < count else { break }
                let c = src[i]
                guard o + 1 + Int(extra[Int(c)]) <= end else { return false }
                o += Self.writeEscape(c, into: dst + o)
                i += 1
            }
            return true
        }
    }

    /// The escape of one byte that needs one; returns its length (2 or 6).
    private static func writeEscape(_ c: UInt8, into dst: UnsafeMutableRawPointer) -> Int {
        dst.storeBytes(of: UInt8(ascii: "\\"), as: UInt8.self)
        let second: UInt8
        switch c {
        case UInt8(ascii: "\""): second = UInt8(ascii: "\"")
        case UInt8(ascii: "\\"): second = UInt8(ascii: "\\")
        case 0x0A: second = UInt8(ascii: "n")
        case 0x0D: second = UInt8(ascii: "r")
        case 0x09: second = UInt8(ascii: "t")
        default:
            let hex: StaticString = "0123456789abcdef"
            dst.storeBytes(of: UInt8(ascii: "u"), toByteOffset: 1, as: UInt8.self)
            dst.storeBytes(of: UInt8(ascii: "0"), toByteOffset: 2, as: UInt8.self)
            dst.storeBytes(of: UInt8(ascii: "0"), toByteOffset: 3, as: UInt8.self)
            dst.storeBytes(of: hex.utf8Start[Int(c >> 4)], toByteOffset: 4, as: UInt8.self)
            dst.storeBytes(of: hex.utf8Start[Int(c & 0xF)], toByteOffset: 5, as: UInt8.self)
            return 6
        }
        dst.storeBytes(of: second, toByteOffset: 1, as: UInt8.self)
        return 2
    }

    /// "00" to "99": two digits per division when writing integers.
    private static let digitPairs: [UInt8] = (0..<100).flatMap { [UInt8(ascii: "0") + UInt8($0 / 10), UInt8(ascii: "0") + UInt8($0 % 10)] }

    /// Writes an unsigned integer's decimal digits into `out` (at least 20 bytes); returns how
    /// many. Two digits per division, from a table, written in place from the end.
    public static func writeDigits(_ value: UInt64, into out: UnsafeMutableRawBufferPointer) -> Int {
        var n = 1
        var power: UInt64 = 10
        while n < 20, value >= power {
            n += 1
            power &*= 10
        }
        let dst = out.baseAddress!
        return Self.digitPairs.withUnsafeBufferPointer { pairs in
            var v = value
            var i = n
            while v >= 100 {
                let pair = Int(v % 100) &* 2
                v /= 100
                i -= 2
                dst.storeBytes(of: pairs[pair], toByteOffset: i, as: UInt8.self)
                dst.storeBytes(of: pairs[pair + 1], toByteOffset: i + 1, as: UInt8.self)
            }
            if v >= 10 {
                dst.storeBytes(of: pairs[Int(v) &* 2], toByteOffset: 0, as: UInt8.self)
                dst.storeBytes(of: pairs[Int(v) &* 2 + 1], toByteOffset: 1, as: UInt8.self)
            } else {
                dst.storeBytes(of: UInt8(ascii: "0") &+ UInt8(v), toByteOffset: 0, as: UInt8.self)
            }
            return n
        }
    }

    public static func writeInteger(_ i: some BinaryInteger, into out: inout [UInt8]) {
        out.append(contentsOf: String(i).utf8)
    }
}
