extension StringProtocol {
    /// The text without leading and trailing characters that match `predicate`.
    public func trimming(while predicate: (Character) -> Bool) -> String {
        var s = Substring(self)
        while let f = s.first, predicate(f) { s.removeFirst() }
        while let l = s.last, predicate(l) { s.removeLast() }
        return String(s)
    }

    /// The text without leading and trailing spaces and tabs.
    func trimmingSpaces() -> String {
        self.trimming { $0 == " " || $0 == "\t" }
    }
}
