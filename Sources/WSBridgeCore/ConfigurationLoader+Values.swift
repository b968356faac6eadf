/// How the reader reads a duration and an HTTP token out of their text.
extension ConfigurationReader {
    /// Seconds from a number (seconds) or from numbers each with a unit, added up as Go's
    /// durations are: "500ms", "20s", "2m", "1h", "23h50m", "1m30s".
    static func parseDuration(_ s: String) -> Double? {
        let t = s.trimmingSpaces()
        if let seconds = Double(t) { return seconds }
        let units: [Substring: Double] = ["ms": 0.001, "us": 1e-6, "s": 1, "m": 60, "h": 3600]
        var total = 0.0
        var rest = Substring(t)
        guard !rest.isEmpty else { return nil }
        while !rest.isEmpty {
            let number = rest.prefix { $0.isNumber || $0 == "." }
            rest = rest.dropFirst(number.count).drop { $0 == " " }
            let unit = rest.prefix { $0.isLetter }
            rest = rest.dropFirst(unit.count).drop { $0 == " " }
            guard let n = Double(number), let factor = units[unit] else { return nil }
            total += n * factor
        }
        return total
    }

    static func isToken(_ s: String) -> Bool {
        !s.isEmpty
            && s.utf8.allSatisfy { c in
                (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
                    || "!#$%&'*+-.^_`|~".utf8.contains(c)
            }
    }
}
