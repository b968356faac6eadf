import CWSBridgeBytes

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The bytes of the value at a path in a JSON text, found by scanning: the members and elements
/// before it are skipped, not parsed, and nothing is built. For a value or two of every message
/// (a renewal's `upstream.dedupe` paths) where a parse would build the whole message.
///
/// It reads only as far as the value's end and does not check the rest: on a valid JSON text it
/// finds what `JSONValue.value(at:)` finds, as the raw bytes of that value, but for an object
/// with a key twice (the scan takes the first member, a parse the last; RFC 8259 leaves which to
/// the reader). A key written with an escape (or, for a path key with U+FFFD, a name with bytes
/// past ASCII: a parse reads bytes that are not UTF-8 as U+FFFD), or bytes that are not JSON
/// where it reads, make it `unsure`: the caller parses instead.
package enum JSONPathScan: Equatable, Sendable {
    /// The value's bytes: `start..<end` in the text.
    case found(Range<Int>)
    /// The text has no value there (a member missing, an index past the end, a scalar where the
    /// path goes on).
    case missing
    /// The scan cannot tell; parse the text.
    case unsure

    /// A path made ready for scans: each key's bytes, each index.
    package struct Path: Sendable {
        fileprivate let components: [(key: [UInt8], index: Int?, repaired: Bool)]

        package init(_ path: [JSONValue.PathComponent]) {
            // A key with U+FFFD may be a name whose bytes were not UTF-8 (a parse repairs them).
            self.components = path.map { (Array($0.key.utf8), $0.index, $0.key.unicodeScalars.contains("\u{FFFD}")) }
        }
    }

    package static func scan(_ path: [JSONValue.PathComponent], in bytes: UnsafeRawBufferPointer) -> JSONPathScan {
        Self.scan(Path(path), in: bytes)
    }

    package static func scan(_ path: Path, in bytes: UnsafeRawBufferPointer) -> JSONPathScan {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return .unsure }
        var scanner = Scanner(p: base.assumingMemoryBound(to: UInt8.self), n: bytes.count)
        return scanner.find(path)
    }

    /// Walks the members of the object that is the text, once: `visit` is given each member's
    /// name (its bytes between the quotes) and its value's range, in order (a name twice is
    /// given twice; one with bytes that are not UTF-8 as they are, which a parse reads as U+FFFD:
    /// compare it only with ASCII names). False when the scan cannot tell (the text is not an
    /// object, a name has an escape, bytes that are not JSON where it reads); `visit` may have
    /// been given some members by then. Like `scan`, it does not read past the closing brace.
    /// `visit` returns whether to stop there (true: it has what it needs; then the rest is not
    /// read, and the walk counts as done).
    package static func members(in bytes: UnsafeRawBufferPointer, _ visit: (UnsafeRawBufferPointer, Range<Int>) -> Bool) -> Bool {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return false }
        var scanner = Scanner(p: base.assumingMemoryBound(to: UInt8.self), n: bytes.count)
        return scanner.members(visit)
    }

    /// A cursor over the text; a byte past its end reads as 0, which a JSON text never has
    /// outside a string (nor raw inside one): "not JSON here".
    private struct Scanner {
        let p: UnsafePointer<UInt8>
        let n: Int
        var i = 0

        @inline(__always) private func at(_ i: Int) -> UInt8 { i < self.n ? self.p[i] : 0 }

        @inline(__always) private mutating func skipSpace() {
            while true {
                let b = self.at(self.i)
                guard b == 0x20 || b == 0x0A || b == 0x0D || b == 0x09 else { return }
                self.i += 1
            }
        }

        @inline(__always) mutating func find(_ path: Path) -> JSONPathScan {
            self.skipSpace()
            for (key, index, repaired) in path.components {
                let outcome: JSONPathScan
                switch self.at(self.i) {
                case UInt8(ascii: "{"): outcome = self.member(key, repaired: repaired)
                case UInt8(ascii: "["): outcome = index.map { self.element($0) } ?? .missing
                case 0: return .unsure
                default: return .missing
                }
                guard case .found = outcome else { return outcome }
            }
            let start = self.i
            guard self.skipValue() else { return .unsure }
            return .found(start..<self.i)
        }

        /// At `{`: moves to the value of the first member named `key` (`.found`, its range unused).
        /// `repaired`: `key` has U+FFFD, which a name not in UTF-8 is read as.
        @inline(__always) private mutating func member(_ key: [UInt8], repaired: Bool) -> JSONPathScan {
            self.i += 1
            self.skipSpace()
            if self.at(self.i) == UInt8(ascii: "}") { return .missing }
            while true {
                guard self.at(self.i) == UInt8(ascii: "\"") else { return .unsure }
                let nameStart = self.i + 1
                guard self.skipString() else { return .unsure }
                let nameEnd = self.i - 1
                self.skipSpace()
                guard self.at(self.i) == UInt8(ascii: ":") else { return .unsure }
                self.i += 1
                self.skipSpace()
                let name = UnsafeRawBufferPointer(start: self.p + nameStart, count: nameEnd - nameStart)
                if name.count == key.count, key.withUnsafeBytes({ $0.count == 0 || memcmp($0.baseAddress!, name.baseAddress!, $0.count) == 0 }) {
                    return .found(self.i..<self.i)
                }
                // A name with an escape may be `key` written another way.
                if memchr(name.baseAddress!, 0x5C, name.count) != nil || repaired && name.contains(where: { $0 >= 0x80 }) { return .unsure }
                if let end = self.skipToNext(closing: UInt8(ascii: "}")) { return end }
            }
        }

        /// See `JSONPathScan.members(in:_:)`.
        mutating func members(_ visit: (UnsafeRawBufferPointer, Range<Int>) -> Bool) -> Bool {
            self.skipSpace()
            guard self.at(self.i) == UInt8(ascii: "{") else { return false }
            self.i += 1
            self.skipSpace()
            if self.at(self.i) == UInt8(ascii: "}") { return true }
            while true {
                guard self.at(self.i) == UInt8(ascii: "\"") else { return false }
                let nameStart = self.i + 1
                guard self.skipString() else { return false }
                let name = UnsafeRawBufferPointer(start: self.p + nameStart, count: self.i - 1 - nameStart)
                // A name with an escape may be any. (One past ASCII is given as it is: a parse
                // reads bytes that are not UTF-8 as U+FFFD, which no ASCII name equals.)
                if memchr(name.baseAddress!, 0x5C, name.count) != nil { return false }
                self.skipSpace()
                guard self.at(self.i) == UInt8(ascii: ":") else { return false }
                self.i += 1
                self.skipSpace()
                let start = self.i
                guard self.skipValue() else { return false }
                if visit(name, start..<self.i) { return true }
                self.skipSpace()
                switch self.at(self.i) {
                case UInt8(ascii: ","):
                    self.i += 1
                    self.skipSpace()
                case UInt8(ascii: "}"):
                    return true
                default:
                    return false
                }
            }
        }

        /// Past the value here and the comma after it (nil: at the next member or element); or
        /// `.missing` at the container's `closing` bracket, `.unsure` at anything else.
        @inline(__always) private mutating func skipToNext(closing: UInt8) -> JSONPathScan? {
            guard self.skipValue() else { return .unsure }
            self.skipSpace()
            switch self.at(self.i) {
            case UInt8(ascii: ","):
                self.i += 1
                self.skipSpace()
                return nil
            case closing:
                return .missing
            default:
                return .unsure
            }
        }

        /// At `[`: moves to element `index`.
        private mutating func element(_ index: Int) -> JSONPathScan {
            self.i += 1
            self.skipSpace()
            if self.at(self.i) == UInt8(ascii: "]") { return .missing }
            var k = 0
            while true {
                if k == index { return .found(self.i..<self.i) }
                if let end = self.skipToNext(closing: UInt8(ascii: "]")) { return end }
                k += 1
            }
        }

        /// At `"`: past the closing quote (the next quote not escaped: in the first 24 bytes byte
        /// by byte, a name's or a short value's, else found by memchr).
        @inline(__always) private mutating func skipString() -> Bool {
            var k = self.i + 1
            let short = min(self.n, k + 24)
            while k < short {
                let b = self.p[k]
                if b == UInt8(ascii: "\"") {
                    self.i = k + 1
                    return true
                }
                if b == 0x5C { break }
                k += 1
            }
            if k == self.n { return false }
            // From the backslash, or past the bytes read (none of them a quote).
            var from = k
            while from < self.n {
                guard let quote = memchr(self.p + from, Int32(UInt8(ascii: "\"")), self.n - from) else { return false }
                let q = self.p.distance(to: quote.assumingMemoryBound(to: UInt8.self))
                // Escaped when an odd number of backslashes stand before it.
                var slashes = 0
                while q - 1 - slashes > self.i, self.p[q - 1 - slashes] == 0x5C { slashes += 1 }
                if slashes % 2 == 0 {
                    self.i = q + 1
                    return true
                }
                from = q + 1
            }
            return false
        }

        /// Past one value: a string, an object or array (nesting counted, strings in it skipped
        /// whole), or a scalar (up to a delimiter).
        @inline(__always) private mutating func skipValue() -> Bool {
            switch self.at(self.i) {
            case 0, UInt8(ascii: "}"), UInt8(ascii: "]"), UInt8(ascii: ","), UInt8(ascii: ":"):
                return false
            case UInt8(ascii: "\""):
                return self.skipString()
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                // Sixteen bytes per step, where no string in it has an escape.
                let end = cwsb_json_container_end(self.p + self.i, self.n - self.i)
                if end > 0 {
                    self.i += end
                    return true
                }
                var depth = 0
                while self.i < self.n {
                    switch self.p[self.i] {
                    case UInt8(ascii: "\""):
                        guard self.skipString() else { return false }
                        continue
                    case UInt8(ascii: "{"), UInt8(ascii: "["):
                        depth += 1
                    case UInt8(ascii: "}"), UInt8(ascii: "]"):
                        depth -= 1
                        if depth == 0 {
                            self.i += 1
                            return true
                        }
                    default:
                        break
                    }
                    self.i += 1
                }
                return false
            default:
                let start = self.i
                while self.i < self.n {
                    let b = self.p[self.i]
                    if b == UInt8(ascii: ",") || b == UInt8(ascii: "}") || b == UInt8(ascii: "]") || b <= 0x20 { break }
                    self.i += 1
                }
                return self.i > start
            }
        }
    }
}
