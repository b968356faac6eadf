import CWSBridgeBytes

/// Validates UTF-8 as it arrives, fragment by fragment, so a text message with invalid bytes
/// fails at the fragment that carries them (RFC 6455 §8.1), not after the whole message.
///
/// A DFA over bytes (Björn Höhrmann's, with the table written out as ranges): `feed` returns
/// false at the first byte that can never start or continue a valid sequence (overlongs,
/// surrogates, code points past U+10FFFF included); `isComplete` says whether the bytes so far
/// end on a character boundary.
public struct UTF8Validator: Sendable, Equatable {
    /// Continuation bytes still expected, and the allowed range of the next one.
    private var remaining = 0
    private var lower: UInt8 = 0x80
    private var upper: UInt8 = 0xBF

    public init() {}

    /// True when everything fed so far ends at a character boundary.
    public var isComplete: Bool { self.remaining == 0 }

    /// Feeds more bytes; false as soon as they cannot be UTF-8 (the state is then meaningless).
    public mutating func feed(_ bytes: some Sequence<UInt8>) -> Bool {
        for byte in bytes {
            if self.remaining == 0 {
                if byte < 0x80 { continue }
                self.lower = 0x80
                self.upper = 0xBF
                switch byte {
                case 0xC2...0xDF: self.remaining = 1
                case 0xE0:
                    self.remaining = 2
                    self.lower = 0xA0
                case 0xE1...0xEC, 0xEE...0xEF: self.remaining = 2
                case 0xED:
                    self.remaining = 2
                    self.upper = 0x9F
                case 0xF0:
                    self.remaining = 3
                    self.lower = 0x90
                case 0xF1...0xF3: self.remaining = 3
                case 0xF4:
                    self.remaining = 3
                    self.upper = 0x8F
                default: return false
                }
            } else {
                guard byte >= self.lower, byte <= self.upper else { return false }
                self.lower = 0x80
                self.upper = 0xBF
                self.remaining -= 1
            }
        }
        return true
    }

    /// Feeds a whole buffer fast: runs of ASCII are skipped sixteen bytes at a time
    /// (`cwsb_ascii_prefix`, SSE2).
    public mutating func feed(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return true }
        var i = 0
        let n = bytes.count
        while i < n {
            if self.remaining == 0 {
                i += cwsb_ascii_prefix(base + i, n - i)
                if i == n { break }
            }
            guard self.feed(CollectionOfOne(bytes[i])) else { return false }
            i += 1
        }
        return true
    }
}
