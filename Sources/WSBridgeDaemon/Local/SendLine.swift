import CWSBridgeBytes
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// A `send` as apps write it, read in one pass over the line: `{"id":…,"op":"send","text":"…"}`,
/// its keys in any order, `"v":1` allowed, the id a number or a string with no escape. The
/// text's bytes are the upstream message's, copied (unescaped) once into a buffer of its own. Anything else (another op, another key, a
/// `\u` escape, a duplicate key, text after the object) is nil, and the full decoder reads the
/// line and says what is wrong with it, as before.
struct SendLine {
    var id: JSONValue?
    var text: ByteBuffer

    /// `line` is valid UTF-8 (checked before).
    static func scan(_ line: ByteBuffer) -> SendLine? {
        line.withUnsafeReadableBytes { raw -> SendLine? in
            var scanner = Scanner(bytes: raw)
            return scanner.send()
        }
    }

    private struct Scanner {
        let bytes: UnsafeRawBufferPointer
        var i = 0

        init(bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

        private static let quote = UInt8(ascii: "\""), backslash = UInt8(ascii: "\\")

        mutating func skipSpace() {
            while self.i < self.bytes.count {
                switch self.bytes[self.i] {
                case 0x20, 0x09, 0x0A, 0x0D: self.i += 1
                default: return
                }
            }
        }

        mutating func take(_ byte: UInt8) -> Bool {
            self.skipSpace()
            guard self.i < self.bytes.count, self.bytes[self.i] == byte else { return false }
            self.i += 1
            return true
        }

        /// A string's contents (after its opening quote): its range in the line, and whether it
        /// has an escape (then `\u` is not taken here: nil).
        mutating func string() -> (range: Range<Int>, escaped: Bool)? {
            guard let base = self.bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return nil }
            let start = self.i
            var escaped = false
            while true {
                self.i += cwsb_json_plain_prefix(base + self.i, self.bytes.count - self.i)
                guard self.i < self.bytes.count else { return nil }
                let c = self.bytes[self.i]
                if c == Self.quote {
                    defer { self.i += 1 }
                    return (start..<self.i, escaped)
                }
                guard c == Self.backslash, self.i + 1 < self.bytes.count else { return nil }  // a control byte, or a lone backslash
                switch self.bytes[self.i + 1] {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"), UInt8(ascii: "n"), UInt8(ascii: "r"),
                    UInt8(ascii: "t"):
                    escaped = true
                    self.i += 2
                default:
                    return nil
                }
            }
        }

        func equals(_ range: Range<Int>, _ word: StaticString) -> Bool {
            range.count == word.utf8CodeUnitCount && self.bytes.has(word, at: range.lowerBound)
        }

        /// A number's bytes (their grammar checked by `JSONNumber.scanned` when it is the id).
        mutating func number() -> Range<Int>? {
            let start = self.i
            while self.i < self.bytes.count {
                switch self.bytes[self.i] {
                case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "+"), UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E"):
                    self.i += 1
                default:
                    return start < self.i ? start..<self.i : nil
                }
            }
            return nil
        }

        mutating func send() -> SendLine? {
            guard self.take(UInt8(ascii: "{")) else { return nil }
            var id: JSONValue?
            var sawID = false
            var sawOp = false
            var sawV = false
            var text: (range: Range<Int>, escaped: Bool)?
            repeat {
                guard self.take(Self.quote), let key = self.string(), !key.escaped, self.take(UInt8(ascii: ":")) else { return nil }
                self.skipSpace()
                guard self.i < self.bytes.count else { return nil }
                let k = key.range
                if self.equals(k, "text") {
                    guard text == nil, self.take(Self.quote), let value = self.string() else { return nil }
                    text = value
                } else if self.equals(k, "op") {
                    guard !sawOp, self.take(Self.quote), let value = self.string(), !value.escaped, self.equals(value.range, "send") else { return nil }
                    sawOp = true
                } else if self.equals(k, "id") {
                    guard !sawID else { return nil }
                    sawID = true
                    if self.bytes[self.i] == Self.quote {
                        self.i += 1
                        guard let value = self.string(), !value.escaped else { return nil }
                        id = .string(String(decoding: UnsafeRawBufferPointer(rebasing: self.bytes[value.range]), as: UTF8.self))
                    } else {
                        guard let range = self.number(), let number = JSONNumber.scanned(UnsafeRawBufferPointer(rebasing: self.bytes[range])) else {
                            return nil
                        }
                        id = .number(number)
                    }
                } else if self.equals(k, "v") {
                    guard !sawV, let range = self.number(), self.equals(range, "1") else { return nil }
                    sawV = true
                } else {
                    return nil
                }
            } while self.take(UInt8(ascii: ","))
            guard self.take(UInt8(ascii: "}")), sawOp, let text else { return nil }
            self.skipSpace()
            guard self.i == self.bytes.count else { return nil }
            // A buffer of its own (a slice would keep the whole read buffer alive while the
            // message waits for the link), the bytes copied once, unescaped if need be.
            var out = ByteBuffer()
            out.reserveCapacity(text.range.count)
            guard text.escaped else {
                out.writeBytes(UnsafeRawBufferPointer(rebasing: self.bytes[text.range]))
                return SendLine(id: id, text: out)
            }
            // The runs between escapes copied whole (the scan stops at a backslash: the string
            // has no quote or control byte left in it).
            guard let base = self.bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return nil }
            var k = text.range.lowerBound
            while k < text.range.upperBound {
                let run = cwsb_json_plain_prefix(base + k, text.range.upperBound - k)
                if run > 0 {
                    out.writeBytes(UnsafeRawBufferPointer(rebasing: self.bytes[k..<(k + run)]))
                    k += run
                    continue
                }
                let unescaped: UInt8 =
                    switch self.bytes[k + 1] {
                    case UInt8(ascii: "b"): 0x08
                    case UInt8(ascii: "f"): 0x0C
                    case UInt8(ascii: "n"): 0x0A
                    case UInt8(ascii: "r"): 0x0D
                    case UInt8(ascii: "t"): 0x09
                    case let other: other
                    }
                out.writeInteger(unescaped)
                k += 2
            }
            return SendLine(id: id, text: out)
        }
    }
}
