import Testing
import WSBridgeProtocol

/// The one-pass string escape writes exactly what JSON's rules say (checked against a plain
/// per-byte reference written here), in exactly the length `escapedCount` promised.
@Suite struct JSONEscapeTests {
    @Test func oneEscapePassMatchesTheRunWriter() {
        var seed: UInt32 = 7
        var samples: [[UInt8]] = [[], Array("plain".utf8), Array("q\"b\\n\n\r\t\u{1}\u{1f}é€😀".utf8)]
        for length in [1, 2, 17, 300] {
            samples.append(
                (0..<length).map { _ in
                    seed = seed &* 1_103_515_245 &+ 12345
                    // ASCII with every control character, quotes and backslashes well represented.
                    return UInt8((seed >> 16) % 0x80)
                }
            )
        }
        for bytes in samples {
            let expected = Self.reference(bytes)
            var viaWriter: [UInt8] = []
            bytes.withUnsafeBytes { JSONWriter.writeString(utf8: $0, into: &viaWriter) }
            #expect(viaWriter == expected)
            let count = bytes.withUnsafeBytes { JSONWriter.escapedCount(utf8: $0) }
            for spare in [0, 64] {
                var out = [UInt8](repeating: 0xEE, count: count + spare)
                let written = bytes.withUnsafeBytes { input in out.withUnsafeMutableBytes { JSONWriter.writeEscaped(utf8: input, into: $0) } }
                #expect(written == count)
                #expect(Array(out.prefix(count)) == expected, "\(bytes), \(spare) spare")
            }
        }
    }

    /// The scan (64 and 16 bytes per step, then bytewise): one byte to escape at every place of a
    /// plain run, among bytes that differ from `"`, `\\` and the control characters only in their
    /// high bit, with a quote at the end found after it.
    @Test func everyPlaceOfAnEscapeInPlainRunsIsFound() {
        let plain = Array("ab\u{A2}\u{DC}é€".utf8) + [0xA2, 0xDC, 0x80, 0x9F, 0xA0, 0xFF]  // UTF-8 and bytes ≥ 0x80
        for escape: UInt8 in [0x22, 0x5C, 0x0A, 0x00, 0x1F, 0x7F] {
            // Lengths around the scan's steps of 16 and 64 bytes, and its last bytes.
            for length in [7, 8, 9, 16, 23, 40, 63, 64, 65, 130] {
                for place in 0..<length {
                    var bytes = (0..<length).map { plain[$0 % plain.count] }
                    bytes[place] = escape
                    // And one more at the end: the first is found first.
                    if place < length - 1 { bytes[length - 1] = 0x22 }
                    let count = bytes.withUnsafeBytes { JSONWriter.escapedCount(utf8: $0) }
                    // Exactly the room it needs (byte by byte near the end), and room to spare
                    // (word stores all through): the same output, nothing written past it.
                    for spare in [0, 64] {
                        var out = [UInt8](repeating: 0xEE, count: count + spare)
                        let written = bytes.withUnsafeBytes { input in out.withUnsafeMutableBytes { JSONWriter.writeEscaped(utf8: input, into: $0) } }
                        #expect(
                            written == count && Array(out.prefix(count)) == Self.reference(bytes), "escape \(escape) at \(place) of \(length), \(spare) spare")
                    }
                }
            }
        }
    }

    /// `"`, `\\` and the short escapes by name, other control characters as \u00XX, the rest as is.
    static func reference(_ bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [0x22]
        for c in bytes {
            switch c {
            case 0x22: out += Array(#"\""#.utf8)
            case 0x5C: out += Array(#"\\"#.utf8)
            case 0x0A: out += Array(#"\n"#.utf8)
            case 0x0D: out += Array(#"\r"#.utf8)
            case 0x09: out += Array(#"\t"#.utf8)
            case 0..<0x20: out += Array("\\u00".utf8) + Array(String(c, radix: 16).leftPadded(2).utf8)
            default: out.append(c)
            }
        }
        out.append(0x22)
        return out
    }

    @Test func digits() {
        var values: [UInt64] = [0, 7, 10, 99, 1_795_313_566_992, .max, .max - 1]
        var power: UInt64 = 1
        for _ in 0..<19 {
            power *= 10
            values += [power - 1, power, power + 1]
        }
        for value in values {
            var out = [UInt8](repeating: 0, count: 20)
            let n = out.withUnsafeMutableBytes { JSONWriter.writeDigits(value, into: $0) }
            #expect(String(decoding: out.prefix(n), as: UTF8.self) == String(value))
        }
    }
}

extension String {
    fileprivate func leftPadded(_ width: Int) -> String { String(repeating: "0", count: max(0, width - self.count)) + self }
}
