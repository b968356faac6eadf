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

    public init(file: String, line: Int? = nil, column: Int? = nil, key: String? = nil, value: String? = nil, problem: String) {
        self.file = file
        self.line = line
        self.column = column
        self.key = key
        self.value = value
        self.problem = problem
    }

    public var description: String {
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
