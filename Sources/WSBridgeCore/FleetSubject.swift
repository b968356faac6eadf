import WSBridgeProtocol

/// `fleet.subject` with `${msg:PATH}` (docs/fleet.md): a subject per key, each placeholder the
/// message's value at PATH as one subject token (`feeds.binance.${msg:s}` puts a `BTCUSDT` ticker
/// on `feeds.binance.BTCUSDT`). A value is taken as its text (a string without its quotes), each
/// byte that a token cannot hold (a dot, `*`, `>`, a space, anything past ASCII) made `_`; a
/// message without the value (or not JSON) goes on the token `_`.
public struct FleetSubject: Sendable, Equatable {
    public enum Part: Sendable, Equatable {
        case text(String)
        case value(String)
    }

    public let parts: [Part]
    private let paths: [JSONPathScan.Path?]

    public static func == (a: FleetSubject, b: FleetSubject) -> Bool { a.parts == b.parts }

    /// nil when a `${` is not closed or names no `msg:` path.
    public init?(_ template: String) {
        var parts: [Part] = []
        var text = ""
        var rest = Substring(template)
        while let first = rest.first {
            guard first == "$", rest.dropFirst().first == "{" else {
                text.append(first)
                rest = rest.dropFirst()
                continue
            }
            guard let close = rest.firstIndex(of: "}") else { return nil }
            let inner = rest[rest.index(rest.startIndex, offsetBy: 2)..<close]
            guard inner.hasPrefix("msg:"), inner.count > 4 else { return nil }
            if !text.isEmpty { parts.append(.text(text)) }
            text = ""
            parts.append(.value(String(inner.dropFirst(4))))
            rest = rest[rest.index(after: close)...]
        }
        if !text.isEmpty { parts.append(.text(text)) }
        self.parts = parts
        self.paths = parts.map {
            guard case .value(let path) = $0 else { return nil }
            return JSONPathScan.Path(JSONValue.PathComponent.split(path))
        }
    }

    /// It has a placeholder: each message's subject is its own.
    public var isTemplate: Bool { self.parts.contains { if case .value = $0 { true } else { false } } }

    /// The subject with every placeholder `filler` (`x`: to check it is one; `_`: a message
    /// of no key's, such as a takeover).
    public func filled(_ filler: String) -> String {
        self.parts.map { if case .text(let t) = $0 { t } else { filler } }.joined()
    }

    /// The subject of the message `bytes`.
    public func subject(for bytes: UnsafeRawBufferPointer) -> String {
        var out = ""
        var parsed: JSONValue??
        for (part, path) in zip(self.parts, self.paths) {
            switch part {
            case .text(let text):
                out += text
            case .value(let name):
                guard let path else { continue }
                switch JSONPathScan.scan(path, in: bytes) {
                case .found(let range):
                    out += Self.token(UnsafeRawBufferPointer(rebasing: bytes[range]))
                case .missing:
                    out += "_"
                case .unsure:
                    if parsed == nil { parsed = .some(try? JSONValue.parse(bytes)) }
                    let value = parsed??.value(at: JSONValue.PathComponent.split(name))
                    let text = value.map { if case .string(let s) = $0 { s } else { $0.serialized } } ?? ""
                    out += text.utf8.withContiguousStorageIfAvailable { Self.token(UnsafeRawBufferPointer($0)) } ?? "_"
                }
            }
        }
        return out
    }

    /// A value's bytes as one subject token: a string's without its quotes.
    static func token(_ raw: UnsafeRawBufferPointer) -> String {
        var bytes = raw[...]
        if bytes.count >= 2, bytes.first == UInt8(ascii: "\""), bytes.last == UInt8(ascii: "\"") { bytes = bytes.dropFirst().dropLast() }
        guard !bytes.isEmpty else { return "_" }
        let allowed: (UInt8) -> Bool = { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || "-_:=+@#!~%".utf8.contains(b)
        }
        return String(decoding: bytes.map { allowed($0) ? $0 : UInt8(ascii: "_") }, as: UTF8.self)
    }
}
