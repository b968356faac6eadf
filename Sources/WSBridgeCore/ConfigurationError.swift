/// A configuration problem, located and explained: what was wrong and what is accepted.
///
/// Rendered as `FILE:LINE: KEY = VALUE: PROBLEM` so editors and operators can jump to it.
public struct ConfigurationError: Error, Equatable, CustomStringConvertible {
    public var file: String
    public var line: Int?
    public var column: Int?
    /// Dotted key (`heartbeat.interval`), or nil for a syntax error.
    public var key: String?
    /// The offending value as written, if any.
    public var value: String?
    /// What is wrong and what is accepted instead.
    public var problem: String
    /// The file's other problems, after this one in file order: a file is read to its end, so
    /// that one run names every mistake.
    public var further: [ConfigurationError] = []

    public init(file: String, line: Int? = nil, column: Int? = nil, key: String? = nil, value: String? = nil, problem: String) {
        self.file = file
        self.line = line
        self.column = column
        self.key = key
        self.value = value
        self.problem = problem
    }

    /// This problem and the further ones, one line each, in file order.
    public var description: String {
        ([self.oneLine] + self.further.map(\.oneLine)).joined(separator: "\n")
    }

    /// Problems in file order (those without a line last, in the order found), the first holding
    /// the others; nil for none.
    public static func inFileOrder(_ problems: [ConfigurationError]) -> ConfigurationError? {
        let ordered = problems.enumerated().sorted { a, b in
            (a.element.line ?? Int.max, a.offset) < (b.element.line ?? Int.max, b.offset)
        }.map(\.element)
        guard var first = ordered.first else { return nil }
        first.further = Array(ordered.dropFirst())
        return first
    }

    /// This one problem: `FILE:LINE: KEY = VALUE: PROBLEM`.
    public var oneLine: String {
        var location = self.file
        if let line { location += ":\(line)" }
        if let column { location += ":\(column)" }
        var subject = ""
        if let key {
            subject = key
            if let value { subject += " = \(value)" }
            subject += ": "
        }
        return "\(location): \(subject)\(self.problem)"
    }
}

extension ConfigurationError {
    /// `text` as a TOML string, the way an operator would write it in the file: in a literal
    /// string ('…') when it holds a double quote and no single one, else in a basic string
    /// ("…") with its quotes and backslashes escaped. For messages that quote a setting.
    package static func tomlString(_ text: String) -> String {
        if text.contains("\"") && !text.contains("'") && !text.contains("\n") { return "'\(text)'" }
        var out = "\""
        for c in text {
            switch c {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            default: out.append(c)
            }
        }
        return out + "\""
    }
}
