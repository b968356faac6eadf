import WSBridgeProtocol

/// One of `upstream.on_open`: a text sent first on every open, with placeholders filled in at
/// that moment. Parsed once, at config load, so a mistyped placeholder is an error there and
/// never a literal `${tokn}` sent upstream.
///
/// - `${token}`: the content of `auth.token_file` (re-read at every connect, trailing newline
///   removed), inserted as it is;
/// - `${last:PATH}`: the JSON value at PATH (dotted, as in filters) in the last upstream message
///   that had it, exactly as received (`123`, `"abc"`, `{"a":1}`), or `null` before any;
/// - `$${` is a literal `${`.
public struct OpeningMessage: Sendable, Equatable {
    public enum Part: Sendable, Equatable {
        case literal(String)
        case token
        case last(path: String)
    }

    /// The text as written in the configuration (placeholders unfilled: safe to show).
    public let template: String
    public let parts: [Part]

    public init(parsing template: String) throws(PlaceholderError) {
        self.template = template
        var parts: [Part] = []
        var literal = ""
        var rest = Substring(template)
        while let dollar = rest.firstIndex(of: "$") {
            literal += rest[..<dollar]
            let after = rest[dollar...].dropFirst()
            if after.hasPrefix("${") {
                literal += "${"
                rest = after.dropFirst(2)
                continue
            }
            guard after.hasPrefix("{") else {
                literal += "$"
                rest = after
                continue
            }
            guard let close = after.firstIndex(of: "}") else {
                throw .notClosed
            }
            let name = String(after[after.index(after: after.startIndex)..<close])
            if name == "token" {
                if !literal.isEmpty { parts.append(.literal(literal)) }
                parts.append(.token)
            } else if name.hasPrefix("last:") {
                let path = String(name.dropFirst(5))
                guard !path.isEmpty, !path.split(separator: ".", omittingEmptySubsequences: false).contains(where: \.isEmpty) else {
                    throw .lastWithoutPath(name)
                }
                if !literal.isEmpty { parts.append(.literal(literal)) }
                parts.append(.last(path: path))
            } else {
                throw .unknown(name, suggestion: Suggestion.closest(to: name.split(separator: ":").first.map(String.init) ?? name, in: ["token", "last"]))
            }
            literal = ""
            rest = after[after.index(after: close)...]
        }
        literal += rest
        if !literal.isEmpty { parts.append(.literal(literal)) }
        self.parts = parts
    }

    public var usesToken: Bool { self.parts.contains(.token) }

    /// The paths of its `${last:PATH}` placeholders.
    public var lastPaths: [String] {
        self.parts.compactMap { if case .last(let p) = $0 { p } else { nil } }
    }

    /// The text to send: `token` for `${token}` (nil: none could be read, so "" goes), `last`
    /// gives the JSON text of a path's last value (nil: none yet, so `null`).
    public func render(token: String?, last: (String) -> String?) -> String {
        var out = ""
        for part in self.parts {
            switch part {
            case .literal(let s): out += s
            case .token: out += token ?? ""
            case .last(let path): out += last(path) ?? "null"
            }
        }
        return out
    }

    public static func == (a: OpeningMessage, b: OpeningMessage) -> Bool { a.template == b.template }
}

/// What is wrong with a placeholder in `upstream.on_open`, and what to write instead: every
/// text is here.
public enum PlaceholderError: Error, Sendable, Equatable, CustomStringConvertible {
    case notClosed
    case lastWithoutPath(String)
    /// `suggestion`: the known name closest to it.
    case unknown(String, suggestion: String?)

    public var description: String {
        switch self {
        case .notClosed: "\"${\" is not closed: write ${token} or ${last:PATH}, or $${ for a literal ${"
        case .lastWithoutPath(let name): "${\(name)} needs a dotted path of the field to resume from, such as ${last:offset} or ${last:data.seq}"
        case .unknown(let name, let suggestion):
            "unknown placeholder ${\(name)}\(suggestion.map { " (did you mean ${\($0 == "last" ? "last:PATH" : $0)}?)" } ?? ""): known are ${token} and ${last:PATH}; write $${ for a literal ${"
        }
    }
}
