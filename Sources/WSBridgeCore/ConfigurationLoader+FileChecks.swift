extension ConfigurationLoader {
    /// A table header whose name does not start with a bare-key character or a quote (`[!x]`)
    /// makes TOMLKit's parser (toml++) fail an assertion and abort the process, where it should
    /// report a syntax error: found by fuzzing (docs/fuzzing.md). The daemon checks for it first,
    /// so a typo in a reloaded file is an error, not a crash. Lines inside a multi-line string
    /// or a multi-line array value are not headers, and are passed over.
    static func checkTableHeaders(_ text: String, fileName: String) throws(ConfigurationError) {
        // Bytes, not Characters: "\r\n" is one Character, and so is "[" with a combining mark.
        var arrayDepth = 0
        var multiline: [UInt8]?
        for (index, raw) in text.utf8.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).enumerated() {
            let line = Array(raw.drop { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") })
            if let delimiter = multiline {
                if Self.occurrences(of: delimiter, in: line) > 0 { multiline = nil }
                continue
            }
            if arrayDepth == 0, line.first == UInt8(ascii: "[") {
                var i = 1
                if i < line.count, line[i] == UInt8(ascii: "[") { i += 1 }
                while i < line.count, line[i] == UInt8(ascii: " ") || line[i] == UInt8(ascii: "\t") { i += 1 }
                guard i < line.count, Self.startsAName(line[i]) else {
                    throw ConfigurationError(
                        file: fileName, line: index + 1, key: nil, value: nil,
                        problem: "TOML syntax error: a table header must start with a name: write [section] with letters, digits, - and _ (or a quoted name)")
                }
                continue
            }
            for delimiter in [Array("\"\"\"".utf8), Array("'''".utf8)] where Self.occurrences(of: delimiter, in: line) % 2 == 1 {
                multiline = delimiter
            }
            arrayDepth = max(0, arrayDepth + Self.bracketBalance(line))
        }
    }

    /// A `\u0000` (or `\U00000000`) escape in a basic string: TOMLKit hands strings over as C
    /// strings, which end at the NUL, so `"A\u0000B"` would silently load as `A`. Refused, with
    /// its line, instead of cut.
    static func checkNULEscapes(_ text: String, fileName: String) throws(ConfigurationError) {
        let bytes = Array(text.utf8)
        let quote = UInt8(ascii: "\"")
        let apostrophe = UInt8(ascii: "'")
        let backslash = UInt8(ascii: "\\")
        let newline = UInt8(ascii: "\n")
        let hash = UInt8(ascii: "#")
        func starts(_ s: String, at i: Int) -> Bool {
            let needle = Array(s.utf8)
            return i + needle.count <= bytes.count && Array(bytes[i..<(i + needle.count)]) == needle
        }
        var line = 1
        var i = 0
        // The string being read: its delimiter (one or three quotes), and whether escapes count.
        var delimiter: [UInt8]?
        var escapes = false
        while i < bytes.count {
            let c = bytes[i]
            if c == newline { line += 1 }
            if let d = delimiter {
                if escapes && c == backslash {
                    if starts("u0000", at: i + 1) || starts("U00000000", at: i + 1) {
                        throw ConfigurationError(
                            file: fileName, line: line, key: nil, value: nil,
                            problem: "a string holds \\u0000 (a NUL character), which wsbridged cannot keep: remove it, or send the message as binary (base64)")
                    }
                    if i + 1 < bytes.count && bytes[i + 1] == newline { line += 1 }
                    i += 2
                    continue
                }
                if i + d.count <= bytes.count && Array(bytes[i..<(i + d.count)]) == d {
                    delimiter = nil
                    i += d.count
                    continue
                }
                i += 1
                continue
            }
            if c == hash {
                while i < bytes.count && bytes[i] != newline { i += 1 }
                continue
            }
            if c == quote || c == apostrophe {
                let triple = i + 2 < bytes.count && bytes[i + 1] == c && bytes[i + 2] == c
                delimiter = triple ? [c, c, c] : [c]
                escapes = c == quote
                i += triple ? 3 : 1
                continue
            }
            i += 1
        }
    }

    /// A bare key's first character, or a quote.
    private static func startsAName(_ b: UInt8) -> Bool {
        (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == UInt8(ascii: "_") || b == UInt8(ascii: "-")
            || b == UInt8(ascii: "\"") || b == UInt8(ascii: "'")
    }

    private static func occurrences(of needle: [UInt8], in line: [UInt8]) -> Int {
        guard line.count >= needle.count else { return 0 }
        var count = 0
        var i = 0
        while i + needle.count <= line.count {
            if Array(line[i..<(i + needle.count)]) == needle {
                count += 1
                i += needle.count
            } else {
                i += 1
            }
        }
        return count
    }

    /// Opening minus closing brackets outside strings and comments.
    private static func bracketBalance(_ line: [UInt8]) -> Int {
        var balance = 0
        var quote: UInt8?
        var escaped = false
        for c in line {
            if let q = quote {
                if escaped {
                    escaped = false
                } else if c == UInt8(ascii: "\\") && q == UInt8(ascii: "\"") {
                    escaped = true
                } else if c == q {
                    quote = nil
                }
                continue
            }
            switch c {
            case UInt8(ascii: "\""), UInt8(ascii: "'"): quote = c
            case UInt8(ascii: "#"): return balance
            case UInt8(ascii: "["): balance += 1
            case UInt8(ascii: "]"): balance -= 1
            default: break
            }
        }
        return balance
    }
}
