/// A JSON number kept as the text it arrived as, so that nothing the daemon re-serializes
/// loses precision: 1234567890123456789 stays 1234567890123456789, 0.1000000000000000000000000001
/// keeps its 28 decimals, and 1e999 stays 1e999 (a Double would make it infinity, then null).
///
/// Equality is by exact decimal value (`1.0 == 1`, `1e2 == 100`, `-0 == 0`), never through
/// Double, so two neighbouring 64-bit ids never compare equal.
public struct JSONNumber: Sendable, Hashable, CustomStringConvertible, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral {
    /// The number's JSON text.
    public let text: String

    /// `text` must be a valid JSON number (the parser checks it, or a scanner that knows).
    package init(validatedText text: String) {
        self.text = text
    }

    /// The number whose JSON text is `bytes`, checked against JSON's grammar
    /// (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`) without a parse; nil if it is not one.
    package static func scanned(_ bytes: UnsafeRawBufferPointer) -> JSONNumber? {
        var k = 0
        let end = bytes.count
        func digits() -> Int {
            let start = k
            while k < end, bytes[k] >= UInt8(ascii: "0"), bytes[k] <= UInt8(ascii: "9") { k += 1 }
            return k - start
        }
        if k < end, bytes[k] == UInt8(ascii: "-") { k += 1 }
        guard k < end else { return nil }
        if bytes[k] == UInt8(ascii: "0") {
            k += 1
        } else if digits() == 0 {
            return nil
        }
        if k < end, bytes[k] == UInt8(ascii: ".") {
            k += 1
            guard digits() > 0 else { return nil }
        }
        if k < end, bytes[k] == UInt8(ascii: "e") || bytes[k] == UInt8(ascii: "E") {
            k += 1
            if k < end, bytes[k] == UInt8(ascii: "+") || bytes[k] == UInt8(ascii: "-") { k += 1 }
            guard digits() > 0 else { return nil }
        }
        guard k == end else { return nil }
        return JSONNumber(validatedText: String(decoding: bytes, as: UTF8.self))
    }

    /// A number from JSON text (`"12"`, `"1e999"`); nil if the text is not one JSON number.
    public init?(_ text: String) {
        guard case .number(let n)? = try? JSONValue.parse(text) else { return nil }
        self = n
    }

    public init(_ value: some BinaryInteger) {
        self.text = String(value)
    }

    /// A Double in its shortest form that reads back the same (whole numbers without ".0").
    /// Not finite: there is no JSON for it; `0` is written, and callers should avoid that.
    public init(_ value: Double) {
        if value.isFinite, value == value.rounded(), abs(value) <= 9_007_199_254_740_992 {
            self.text = String(Int64(value))
        } else if value.isFinite {
            self.text = "\(value)"
        } else {
            self.text = "0"
        }
    }

    public init(integerLiteral value: Int) { self.init(value) }
    public init(floatLiteral value: Double) { self.init(value) }

    public var description: String { self.text }

    /// The nearest Double (may round, or be infinite for 1e999).
    public var doubleValue: Double { Double(self.text) ?? .nan }

    /// The value as an Int when it is a whole number that fits exactly (`12`, `1.2e1`, `12.0`).
    public var intValue: Int? {
        if let i = Int(self.text) { return i }
        let d = self.decimal
        guard d.exponent >= 0, d.exponent < 20 else { return d.digits.isEmpty ? 0 : nil }
        let digits = d.digits + [UInt8](repeating: 0, count: d.exponent)
        var value = 0
        for digit in digits {
            let (m, o1) = value.multipliedReportingOverflow(by: 10)
            let (a, o2) = m.addingReportingOverflow(Int(digit))
            guard !o1, !o2 else { return nil }
            value = a
        }
        return d.negative ? -value : value
    }

    public static func == (a: JSONNumber, b: JSONNumber) -> Bool {
        a.text == b.text || a.decimal == b.decimal
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(self.decimal)
    }

    /// The exact value as sign, significant digits (no leading or trailing zeros) and a
    /// power of ten: value = digits × 10^exponent. Zero has no digits and is never negative.
    struct Decimal: Hashable {
        var negative: Bool
        var digits: [UInt8]
        var exponent: Int
    }

    var decimal: Decimal {
        var negative = false
        var digits: [UInt8] = []
        var exponent = 0
        var fraction = false
        var bytes = Substring(self.text).utf8[...]
        if bytes.first == UInt8(ascii: "-") {
            negative = true
            bytes = bytes.dropFirst()
        }
        var explicitExponent = 0
        var index = bytes.startIndex
        while index != bytes.endIndex {
            let c = bytes[index]
            if c == UInt8(ascii: ".") {
                fraction = true
            } else if c == UInt8(ascii: "e") || c == UInt8(ascii: "E") {
                let rest = String(Substring(bytes[bytes.index(after: index)...]))
                // Exponents beyond what Int holds saturate; such numbers compare by their text.
                explicitExponent = Int(rest.hasPrefix("+") ? String(rest.dropFirst()) : rest) ?? (rest.hasPrefix("-") ? Int.min / 2 : Int.max / 2)
                break
            } else {
                let digit = c &- UInt8(ascii: "0")
                if !(digits.isEmpty && digit == 0) { digits.append(digit) }
                if fraction { exponent -= 1 }
            }
            index = bytes.index(after: index)
        }
        // Leading zeros were skipped; trailing zeros move into the exponent.
        while let last = digits.last, last == 0 {
            digits.removeLast()
            exponent += 1
        }
        if digits.isEmpty { return Decimal(negative: false, digits: [], exponent: 0) }
        let (sum, overflow) = exponent.addingReportingOverflow(explicitExponent)
        return Decimal(negative: negative, digits: digits, exponent: overflow ? explicitExponent : sum)
    }
}
