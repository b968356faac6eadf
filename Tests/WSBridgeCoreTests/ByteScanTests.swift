import CWSBridgeBytes
import Foundation
import Testing

/// The byte scans of the message path (`CWSBridgeBytes`) in each of their forms (SSE2 or the
/// byte loop, AVX2 where this processor has it, and the one chosen at run time) agree with a
/// byte-by-byte reference: a hit at every place of runs of every length up to 140 (around the
/// steps of 16, 32 and 64 bytes and the last bytes), at two alignments, with a second hit at the
/// end that must not be found first.
@Suite struct ByteScanTests {
    typealias Scan = (UnsafePointer<UInt8>?, Int) -> Int

    static func forms(json: Bool) -> [(String, Scan)] {
        var forms: [(String, Scan)] =
            json
            ? [("base", { cwsb_json_plain_prefix_base($0, $1) }), ("chosen", { cwsb_json_plain_prefix($0, $1) })]
            : [("base", { cwsb_ascii_prefix_base($0, $1) }), ("chosen", { cwsb_ascii_prefix($0, $1) })]
        if cwsb_has_avx2() == 1 {
            forms.append(json ? ("avx2", { cwsb_json_plain_prefix_avx2($0, $1) }) : ("avx2", { cwsb_ascii_prefix_avx2($0, $1) }))
        }
        return forms
    }

    /// Runs of `fill` bytes with `hit(place)` at each place, checked against `isHit`.
    static func check(json: Bool, fill: [UInt8], hits: [UInt8], isHit: (UInt8) -> Bool) {
        var failures = 0
        for (name, scan) in Self.forms(json: json) {
            for length in 0...140 {
                for place in -1..<length {
                    for offset in [0, 1] {
                        var bytes = [UInt8](repeating: 0, count: offset) + (0..<length).map { fill[$0 % fill.count] }
                        if place >= 0 { bytes[offset + place] = hits[place % hits.count] }
                        if place >= 0, place < length - 1 { bytes[offset + length - 1] = hits[0] }
                        let expected = bytes[offset...].firstIndex(where: isHit).map { $0 - offset } ?? length
                        let found = bytes.withUnsafeBufferPointer { scan($0.baseAddress! + offset, length) }
                        if found != expected {
                            failures += 1
                            if failures <= 5 { Issue.record("\(name): \(found) for \(expected) (place \(place) of \(length), offset \(offset))") }
                        }
                    }
                }
            }
        }
        #expect(failures == 0)
    }

    /// The AVX2 form is chosen exactly where the kernel lists the processor's `avx2` flag.
    @Test func avx2IsFoundWhereTheProcessorHasIt() throws {
        #if arch(x86_64)
            let cpuinfo = try String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)
            let flags = cpuinfo.split(separator: "\n").first { $0.hasPrefix("flags") }?.split(separator: " ") ?? []
            #expect((cwsb_has_avx2() == 1) == flags.contains("avx2"))
        #else
            #expect(cwsb_has_avx2() == 0)
        #endif
    }

    @Test func theJSONScanFindsTheFirstByteToEscape() {
        // Plain bytes next to the special ones (0x20, 0x21, 0x23, 0x5B, 0x5D, DEL) and UTF-8's.
        Self.check(json: true, fill: [0x61, 0x20, 0x21, 0x23, 0x5B, 0x5D, 0x7F, 0x80, 0xC3, 0xA9, 0xFF], hits: [0x22, 0x5C, 0x00, 0x0A, 0x1F]) {
            $0 < 0x20 || $0 == 0x22 || $0 == 0x5C
        }
    }

    @Test func theASCIIScanFindsTheFirstByteAtOrAbove0x80() {
        Self.check(json: false, fill: [0x61, 0x00, 0x22, 0x7F, 0x40], hits: [0x80, 0xC3, 0xFF, 0xBF]) { $0 >= 0x80 }
    }

    /// Where a JSON container ends (a scan's skip of a value, sixteen bytes per step, then byte by
    /// byte), in each of its forms: as a byte-by-byte reference says, for random texts of
    /// brackets, quotes, backslashes and letters, up to 150 bytes (steps of 32 and 16, the last
    /// bytes), strings across steps.
    @Test func theContainerEndIsFoundAsByteByByte() {
        func reference(_ b: [UInt8]) -> Int {
            var depth = 0
            var inString = false
            for (i, c) in b.enumerated() {
                if c == UInt8(ascii: "\\") { return 0 }
                if inString {
                    if c == UInt8(ascii: "\"") { inString = false }
                    continue
                }
                switch c {
                case UInt8(ascii: "\""): inString = true
                case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    depth -= 1
                    if depth == 0 { return i + 1 }
                default: break
                }
            }
            return 0
        }
        var forms: [(String, Scan)] = [("base", { cwsb_json_container_end_base($0, $1) }), ("chosen", { cwsb_json_container_end($0, $1) })]
        if cwsb_has_avx2() == 1 { forms.append(("avx2", { cwsb_json_container_end_avx2($0, $1) })) }
        let alphabet = Array(#"{}[]"\a :,"#.utf8) + Array(repeating: UInt8(ascii: "x"), count: 12)
        var seed: UInt64 = 46
        var failures = 0
        var found = 0
        for _ in 0..<20_000 {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            let length = Int(seed >> 33) % 150 + 1
            var text = [UInt8(ascii: seed & 1 == 0 ? "{" : "[")]
            for _ in 1..<length {
                seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                // Backslashes rarely, so that most texts are read by the steps.
                let c = alphabet[Int(seed >> 33) % alphabet.count]
                text.append(c == UInt8(ascii: "\\") && seed & 0x70 != 0 ? UInt8(ascii: "x") : c)
            }
            let expected = reference(text)
            if expected > 0 { found += 1 }
            for (form, end) in forms {
                let got = text.withUnsafeBufferPointer { end($0.baseAddress, $0.count) }
                if got != expected, failures < 5 {
                    failures += 1
                    Issue.record("\(form): \(String(decoding: text, as: UTF8.self).debugDescription): \(got), expected \(expected)")
                }
            }
        }
        // Most texts end in range, many past a step of sixteen.
        #expect(found > 2_000)
    }
}
