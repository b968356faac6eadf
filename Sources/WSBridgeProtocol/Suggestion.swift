/// "Did you mean": the known name closest to a mistyped one.
public enum Suggestion {
    /// The name in `known` at the smallest edit distance from `name` (case-insensitive), if that
    /// distance is at most a third of the name's length (at least 1); ties go to the first in
    /// sorted order.
    public static func closest(to name: String, in known: some Collection<String>) -> String? {
        let target = Array(name.lowercased().utf8)
        let limit = max(1, target.count / 3)
        var best: (name: String, distance: Int)?
        for candidate in known.sorted() {
            let d = Self.distance(target, Array(candidate.lowercased().utf8))
            if d <= limit, d < (best?.distance ?? .max) { best = (candidate, d) }
        }
        return best?.name
    }

    /// Levenshtein distance, with a transposition of neighbours counting as one edit.
    static func distance(_ a: [UInt8], _ b: [UInt8]) -> Int {
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var previous2 = [Int](repeating: 0, count: b.count + 1)
        var previous = Array(0...b.count)
        var current = [Int](repeating: 0, count: b.count + 1)
        for i in 1...a.count {
            current[0] = i
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    current[j] = min(current[j], previous2[j - 2] + 1)
                }
            }
            (previous2, previous, current) = (previous, current, previous2)
        }
        return previous[b.count]
    }
}
