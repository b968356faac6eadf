import CWSBridgeBytes

/// Whether an upstream message may concern the protocol layer, told from its bytes without
/// parsing them: it may only if one of the protocol's routing keys (`"KEY"`) is in its text.
package struct RoutingKeys: Sendable {
    /// `"KEY"` for each key, as bytes.
    private let needles: [[UInt8]]

    /// The codec's routing keys (nil: it has none, and every message is read).
    package init?(_ keys: [String]?) {
        guard let keys else { return nil }
        self.needles = keys.map { Array("\"\($0)\"".utf8) }
    }

    /// One pass over the text: at each quote, each key; at a backslash, a `\u` escape (a key
    /// may be written with one: then the message is read).
    package func mayRoute(_ text: UnsafeRawBufferPointer) -> Bool {
        let needles = self.needles
        let quote = UInt8(ascii: "\"")
        let backslash = UInt8(ascii: "\\")
        let count = text.count
        guard let base = text.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return false }
        var i = 0
        while i < count {
            // To the next quote, backslash or control byte, many bytes at a time.
            i += cwsb_json_plain_prefix(base + i, count - i)
            guard i < count else { break }
            let c = text[i]
            if c == backslash {
                if i + 1 < count && text[i + 1] == UInt8(ascii: "u") { return true }
                i += 2
                continue
            }
            if c == quote {
                for needle in needles where needle.count <= count - i {
                    var j = 1
                    while j < needle.count && text[i + j] == needle[j] { j += 1 }
                    if j == needle.count { return true }
                }
            }
            i += 1
        }
        return false
    }
}
