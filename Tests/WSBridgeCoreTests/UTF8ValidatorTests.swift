import Testing
import WSBridgeCore

@Suite struct UTF8ValidatorTests {
    static func valid(_ bytes: [UInt8]) -> Bool {
        var v = UTF8Validator()
        return v.feed(bytes) && v.isComplete
    }

    @Test func agreesWithTheStandardLibraryOnEveryTwoAndThreeByteSequence() {
        var checked = 0
        for a in UInt8(0xC0)...0xF5 {
            for b in UInt8(0x70)...0xC5 {
                for c in [UInt8(0x41), 0x80, 0x9F, 0xA0, 0xBF, 0xC0] {
                    let bytes = [a, b, c]
                    #expect(Self.valid(bytes) == (String(validating: bytes, as: UTF8.self) != nil), "\(bytes)")
                    checked += 1
                }
            }
        }
        #expect(checked > 10_000)
    }

    @Test(
        arguments: [
            ([0xF0, 0x9F, 0x98, 0x80], true),  // 😀
            ([0xF4, 0x8F, 0xBF, 0xBF], true),  // U+10FFFF
            ([0xF4, 0x90, 0x80, 0x80], false),  // past U+10FFFF
            ([0xED, 0xA0, 0x80], false),  // a surrogate
            ([0xC0, 0xAF], false),  // overlong
            ([0xE0, 0x80, 0xAF], false),  // overlong
            ([0xF8, 0x88, 0x80, 0x80, 0x80], false),
            ([0xCE, 0xBA, 0xE1, 0xBD, 0xB9, 0xCF, 0x83, 0xCE, 0xBC, 0xCE, 0xB5], true),  // κόσμε
        ] as [([UInt8], Bool)])
    func knownSequences(_ bytes: [UInt8], _ valid: Bool) {
        #expect(Self.valid(bytes) == valid)
        var fast = UTF8Validator()
        let ok = bytes.withUnsafeBytes { fast.feed($0) }
        #expect((ok && fast.isComplete) == valid)
    }

    @Test func failsAtTheFragmentWithTheBadByteAndToleratesSplitCharacters() {
        var v = UTF8Validator()
        // κόσμε split inside a character: still fine, but not complete between the fragments.
        let first = v.feed([0xCE, 0xBA, 0xE1])
        #expect(first)
        #expect(!v.isComplete)
        let second = v.feed([0xBD, 0xB9])
        #expect(second)
        #expect(v.isComplete)
        // A fragment that breaks the text fails at once, before any later fragment.
        let third = v.feed([0x41, 0xED, 0xA0])
        #expect(!third)
    }

    @Test func longASCIIRunsTakeTheFastPath() {
        let text = Array(String(repeating: "plain ascii text, ", count: 1000).utf8) + [0xC3, 0xA9]
        var v = UTF8Validator()
        let ok = text.withUnsafeBytes { v.feed($0) }
        #expect(ok)
        #expect(v.isComplete)
        var bad = UTF8Validator()
        let failed = !(text + [0xFF]).withUnsafeBytes { bad.feed($0) }
        #expect(failed)
    }

    /// The ASCII scan (64 and 16 bytes per step): a non-ASCII byte at every place of a run,
    /// valid (é) or not (a lone continuation byte), is seen by the fast path as by the byte-wise
    /// one; the lone byte is found first even with an é later in the same step.
    @Test func aNonASCIIByteAtEveryPlaceIsSeen() {
        for length in [15, 16, 17, 31, 32, 33, 40, 63, 64, 65, 130] {
            for place in 0..<(length - 1) {
                var good = [UInt8](repeating: 0x61, count: length)
                good[place] = 0xC3
                good[place + 1] = 0xA9
                var bad = [UInt8](repeating: 0x61, count: length)
                bad[place] = 0x80
                if place + 3 < length {
                    bad[length - 2] = 0xC3
                    bad[length - 1] = 0xA9
                }
                for (bytes, valid) in [(good, true), (bad, false)] {
                    var fast = UTF8Validator()
                    let ok = bytes.withUnsafeBytes { fast.feed($0) } && fast.isComplete
                    #expect(ok == valid && Self.valid(bytes) == valid, "\(valid ? "é" : "0x80") at \(place) of \(length)")
                }
            }
        }
    }
}
