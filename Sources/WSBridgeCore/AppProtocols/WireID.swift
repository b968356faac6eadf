import WSBridgeProtocol

/// A message id as the wire carries it (a JSON string or number), compared by its JSON text.
///
/// Kept as that text alone, hashed once: the calls and subscriptions are dictionaries of ids,
/// and a routed answer looks one up and removes it (issue 46), so an id is cheap to copy (one
/// string, inline up to 15 bytes), to hash (a word) and to compare. Its JSON value is made when
/// asked for (a message built or rewritten with it).
package struct WireID: Hashable, Sendable, CustomStringConvertible {
    /// The id's JSON text: a number's as it came, a string's quoted and escaped as serialized.
    package let key: String
    /// `key`'s hash (the process's seeded hasher), taken once.
    private let keyHash: Int

    /// `json` must be a string or a number.
    package init(_ json: JSONValue) {
        // A number's JSON text is its text (the common id, made without a buffer).
        if case .number(let number) = json {
            self.init(key: number.text)
        } else {
            self.init(key: json.serialized)
        }
    }

    /// The id whose JSON text is `key` (a number's, or a string's as `JSONValue.serialized`
    /// writes it).
    init(key: String) {
        // Its UTF-8 bytes hashed as bytes (a string's hash would first check its normalization).
        var key = key
        self.keyHash = key.withUTF8 { bytes in
            var hasher = Hasher()
            hasher.combine(bytes: UnsafeRawBufferPointer(bytes))
            return hasher.finalize()
        }
        self.key = key
    }

    /// The id as a JSON value.
    package var json: JSONValue {
        guard self.key.utf8.first == UInt8(ascii: "\"") else { return .number(JSONNumber(validatedText: self.key)) }
        if !self.key.utf8.contains(UInt8(ascii: "\\")) { return .string(String(decoding: self.key.utf8.dropFirst().dropLast(), as: UTF8.self)) }
        return (try? JSONValue.parse(self.key)) ?? .string(self.key)
    }

    package static func == (a: WireID, b: WireID) -> Bool { a.keyHash == b.keyHash && a.key == b.key }
    package func hash(into hasher: inout Hasher) { hasher.combine(self.keyHash) }

    /// What a `Dictionary` or `Set` of ids hashes: the key's seeded hash, taken once, mixed with
    /// the table's own seed by a bijective 64-bit finalizer (MurmurHash3's), not run through a
    /// new `Hasher` on every lookup and every neighbour a removal moves (~150 instructions each,
    /// 300 of a routed Socket.IO ack's). Equal ids give equal values; an upstream still cannot
    /// aim ids at one bucket without the process's seed; two tables with different seeds still
    /// order their ids differently. `_rawHashValue(seed:)` is the standard library's own hook
    /// for this (`Int` and the other integers implement it).
    package func _rawHashValue(seed: Int) -> Int {
        var x = UInt64(bitPattern: Int64(self.keyHash ^ seed))
        x ^= x &>> 33
        x &*= 0xff51_afd7_ed55_8ccd
        x ^= x &>> 33
        x &*= 0xc4ce_b9fe_1a85_ec53
        x ^= x &>> 33
        return Int(bitPattern: UInt(x))
    }
    package var description: String { self.key }
}
