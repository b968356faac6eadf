import CWSBridgeBytes

/// Why a line is not JSON: the byte offset and what was expected there.
public struct JSONParseError: Error, Equatable, CustomStringConvertible {
    public var offset: Int
    public var problem: String
    public var description: String { "invalid JSON at byte \(self.offset): \(self.problem)" }
}

extension JSONValue {
    /// Parses exactly one JSON value (surrounding white space allowed). Input must be UTF-8.
    public static func parse(_ bytes: some Collection<UInt8>, maxDepth: Int = 64) throws(JSONParseError) -> JSONValue {
        let array = Array(bytes)
        var parser = JSONParser(bytes: array, maxDepth: maxDepth)
        parser.skipSpace()
        let value = try parser.parseValue(depth: 0)
        parser.skipSpace()
        guard parser.index == array.count else {
            throw parser.fail("unexpected data after the JSON value")
        }
        return value
    }

    public static func parse(_ text: String) throws(JSONParseError) -> JSONValue {
        try Self.parse(Array(text.utf8))
    }
}

struct JSONParser {
    let bytes: [UInt8]
    let maxDepth: Int
    var index = 0

    init(bytes: [UInt8], maxDepth: Int) {
        self.bytes = bytes
        self.maxDepth = maxDepth
    }

    func fail(_ problem: String) -> JSONParseError {
        JSONParseError(offset: self.index, problem: problem)
    }

    var atEnd: Bool { self.index >= self.bytes.count }

    mutating func skipSpace() {
        while self.index < self.bytes.count {
            switch self.bytes[self.index] {
            case 0x20, 0x09, 0x0A, 0x0D: self.index += 1
            default: return
            }
        }
    }

    mutating func expect(_ literal: String, _ value: JSONValue) throws(JSONParseError) -> JSONValue {
        for c in literal.utf8 {
            guard !self.atEnd, self.bytes[self.index] == c else {
                throw self.fail("expected '\(literal)' or another JSON value (object, array, string, number)")
            }
            self.index += 1
        }
        return value
    }

    mutating func parseValue(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth <= self.maxDepth else { throw self.fail("nested deeper than \(self.maxDepth) levels") }
        guard !self.atEnd else { throw self.fail("unexpected end of input: expected a value") }
        switch self.bytes[self.index] {
        case UInt8(ascii: "{"): return try self.parseObject(depth: depth)
        case UInt8(ascii: "["): return try self.parseArray(depth: depth)
        case UInt8(ascii: "\""): return .string(try self.parseString())
        case UInt8(ascii: "t"): return try self.expect("true", .bool(true))
        case UInt8(ascii: "f"): return try self.expect("false", .bool(false))
        case UInt8(ascii: "n"): return try self.expect("null", .null)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try self.parseNumber()
        default:
            throw self.fail("unexpected character '\(Self.show(self.bytes[self.index]))': expected a value")
        }
    }

    static func show(_ c: UInt8) -> String {
        c >= 0x20 && c < 0x7F ? String(UnicodeScalar(c)) : "\\u{\(String(c, radix: 16))}"
    }

    mutating func parseObject(depth: Int) throws(JSONParseError) -> JSONValue {
        self.index += 1
        var members: [(String, JSONValue)] = []
        self.skipSpace()
        if !self.atEnd, self.bytes[self.index] == UInt8(ascii: "}") {
            self.index += 1
            return .object(members)
        }
        while true {
            self.skipSpace()
            guard !self.atEnd, self.bytes[self.index] == UInt8(ascii: "\"") else {
                throw self.fail("expected a member name in double quotes")
            }
            let key = try self.parseString()
            self.skipSpace()
            guard !self.atEnd, self.bytes[self.index] == UInt8(ascii: ":") else { throw self.fail("expected ':' after a member name") }
            self.index += 1
            self.skipSpace()
            members.append((key, try self.parseValue(depth: depth + 1)))
            self.skipSpace()
            guard !self.atEnd else { throw self.fail("unexpected end of input: expected ',' or '}'") }
            if self.bytes[self.index] == UInt8(ascii: ",") {
                self.index += 1
                continue
            }
            guard self.bytes[self.index] == UInt8(ascii: "}") else { throw self.fail("expected ',' or '}'") }
            self.index += 1
            return .object(members)
        }
    }

    mutating func parseArray(depth: Int) throws(JSONParseError) -> JSONValue {
        self.index += 1
        var items: [JSONValue] = []
        self.skipSpace()
        if !self.atEnd, self.bytes[self.index] == UInt8(ascii: "]") {
            self.index += 1
            return .array(items)
        }
        while true {
            self.skipSpace()
            items.append(try self.parseValue(depth: depth + 1))
            self.skipSpace()
            guard !self.atEnd else { throw self.fail("unexpected end of input: expected ',' or ']'") }
            if self.bytes[self.index] == UInt8(ascii: ",") {
                self.index += 1
                continue
            }
            guard self.bytes[self.index] == UInt8(ascii: "]") else { throw self.fail("expected ',' or ']'") }
            self.index += 1
            return .array(items)
        }
    }

    mutating func parseNumber() throws(JSONParseError) -> JSONValue {
        let start = self.index
        if self.bytes[self.index] == UInt8(ascii: "-") { self.index += 1 }
        func digits(_ p: inout JSONParser) -> Int {
            let s = p.index
            while !p.atEnd, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(p.bytes[p.index]) { p.index += 1 }
            return p.index - s
        }
        let intStart = self.index
        let n = digits(&self)
        guard n > 0 else { throw self.fail("expected a digit") }
        if n > 1 && self.bytes[intStart] == UInt8(ascii: "0") { throw JSONParseError(offset: intStart, problem: "leading zeros are not allowed") }
        if !self.atEnd, self.bytes[self.index] == UInt8(ascii: ".") {
            self.index += 1
            guard digits(&self) > 0 else { throw self.fail("expected a digit after '.'") }
        }
        if !self.atEnd, self.bytes[self.index] == UInt8(ascii: "e") || self.bytes[self.index] == UInt8(ascii: "E") {
            self.index += 1
            if !self.atEnd, self.bytes[self.index] == UInt8(ascii: "+") || self.bytes[self.index] == UInt8(ascii: "-") { self.index += 1 }
            guard digits(&self) > 0 else { throw self.fail("expected a digit in the exponent") }
        }
        // Kept as text: no precision is lost, and no size is out of range.
        return .number(JSONNumber(validatedText: String(decoding: self.bytes[start..<self.index], as: UTF8.self)))
    }

    mutating func parseString() throws(JSONParseError) -> String {
        self.index += 1
        // Most strings have no escape: their end found by the escape scan (sixty-four bytes
        // per step), and the string made straight from their bytes, with no buffer between.
        let start = self.index
        if start < self.bytes.count {
            self.index += self.bytes.withUnsafeBufferPointer { cwsb_json_plain_prefix($0.baseAddress! + start, $0.count - start) }
            if !self.atEnd, self.bytes[self.index] == UInt8(ascii: "\"") {
                self.index += 1
                return String(decoding: self.bytes[start..<(self.index - 1)], as: UTF8.self)
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(self.index - start + 16)
        var runStart = start
        while true {
            guard !self.atEnd else { throw self.fail("unterminated string") }
            let c = self.bytes[self.index]
            if c == UInt8(ascii: "\"") {
                out.append(contentsOf: self.bytes[runStart..<self.index])
                self.index += 1
                return String(decoding: out, as: UTF8.self)
            }
            if c < 0x20 { throw self.fail("control character in a string: escape it (\\n, \\t, \\u00XX)") }
            if c == UInt8(ascii: "\\") {
                out.append(contentsOf: self.bytes[runStart..<self.index])
                self.index += 1
                guard !self.atEnd else { throw self.fail("unterminated escape") }
                let e = self.bytes[self.index]
                self.index += 1
                switch e {
                case UInt8(ascii: "\""): out.append(0x22)
                case UInt8(ascii: "\\"): out.append(0x5C)
                case UInt8(ascii: "/"): out.append(0x2F)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try self.hex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard self.index + 1 < self.bytes.count, self.bytes[self.index] == UInt8(ascii: "\\"), self.bytes[self.index + 1] == UInt8(ascii: "u")
                        else {
                            throw self.fail("lone high surrogate in \\u escape")
                        }
                        self.index += 2
                        let low = try self.hex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw self.fail("invalid low surrogate in \\u escape") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw self.fail("lone low surrogate in \\u escape")
                    }
                    guard let u = Unicode.Scalar(scalar) else { throw self.fail("invalid \\u escape") }
                    out.append(contentsOf: Array(String(Character(u)).utf8))
                default:
                    throw JSONParseError(offset: self.index - 1, problem: "invalid escape '\\\(Self.show(e))'")
                }
                runStart = self.index
                continue
            }
            self.index += 1
        }
    }

    mutating func hex4() throws(JSONParseError) -> UInt32 {
        guard self.index + 4 <= self.bytes.count else { throw self.fail("incomplete \\u escape") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let c = self.bytes[self.index]
            let d: UInt32
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = UInt32(c - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = UInt32(c - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = UInt32(c - UInt8(ascii: "A") + 10)
            default: throw self.fail("invalid hex digit in \\u escape")
            }
            v = v * 16 + d
            self.index += 1
        }
        return v
    }
}
