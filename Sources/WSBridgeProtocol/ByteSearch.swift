#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The byte searches of the scanners that read messages without parsing them (a local send,
/// a protocol's upstream message): a word at a time by memchr and memcmp, not a byte at a time
/// through a collection's indices.
extension UnsafeRawBufferPointer {
    /// Where `byte` first is in `self[start..<end]` (`end`: the end when nil).
    @inlinable package func index(of byte: UInt8, from start: Int, to end: Int? = nil) -> Int? {
        let end = end ?? self.count
        guard start < end, let p = memchr(self.baseAddress! + start, Int32(byte), end - start) else { return nil }
        return UnsafeRawPointer(p) - self.baseAddress!
    }

    /// Whether the bytes at `i` begin with `text`.
    @inlinable package func has(_ text: StaticString, at i: Int) -> Bool {
        let count = text.utf8CodeUnitCount
        guard i >= 0, self.count - i >= count else { return false }
        return count == 0 || memcmp(self.baseAddress! + i, text.utf8Start, count) == 0
    }

    /// Whether the bytes at `i` begin with `bytes`.
    @inlinable package func has(_ bytes: [UInt8], at i: Int) -> Bool {
        guard i >= 0, self.count - i >= bytes.count else { return false }
        return bytes.isEmpty || memcmp(self.baseAddress! + i, bytes, bytes.count) == 0
    }

    /// The number written in decimal digits in `range` (1 to 12 of them, nothing else); nil for
    /// anything else.
    @inlinable package func decimal(_ range: Range<Int>) -> Int? {
        guard !range.isEmpty, range.count <= 12 else { return nil }
        var value = 0
        for k in range {
            let digit = self[k] &- UInt8(ascii: "0")
            guard digit < 10 else { return nil }
            value = value * 10 + Int(digit)
        }
        return value
    }
}
