import Testing
import WSBridgeProtocol

@testable import WSBridgeCore

/// An id is compared by its JSON text: the number 1 and the string "1" are two ids.
@Suite struct WireIDTests {
    @Test func aNumberAndAStringOfTheSameDigitsAreTwoIds() {
        #expect(WireID(json("1")).key == "1" && WireID(json("1.50")).key == "1.50" && WireID(json("-7e3")).key == "-7e3")
        #expect(WireID(json(#""1""#)).key == #""1""# && WireID(json(#""a\"b""#)).key == #""a\"b""#)
        #expect(WireID(json("1")) != WireID(json(#""1""#)))
        #expect(WireID(json("1")) == WireID(.number(JSONNumber(1))))
        #expect(Set([WireID(json("1")), WireID(json(#""1""#)), WireID(json("1"))]).count == 2)
    }

    /// An id is kept as its text: its JSON value, made again when asked for, is the one it was
    /// made from (a number's text as it came; a string with escapes, quotes and a mark that
    /// combines with the quote around it in the text).
    @Test(arguments: ["1", "1.50", "-7e3", "12345678901234567890", #""""#, #""abc""#, #""a\"b\\c\n""#, "\"\u{301}x\u{301}\"", #""\u00e9""#])
    func itsJSONValueIsTheOneItWasMadeFrom(_ text: String) throws {
        let value = try JSONValue.parse(text)
        let id = WireID(value)
        #expect(id.json == value)
        #expect(id.json.serialized == value.serialized)
        #expect(WireID(id.json) == id)
    }

    /// A scanned id (its bytes in an upstream message) is the id the parse would make of them:
    /// equal, with the same hash, so that it finds the call or subscription the parse's id made.
    @Test(arguments: ["7", "-0.5e2", #""sub-1""#, #""""#, "\"\u{301}é\"", #""a\"b""#, #""a\u0062""#])
    func aScannedIDIsTheParsedOne(_ text: String) throws {
        let scanned = Array(text.utf8).withUnsafeBytes { WireID.scannedJSON($0) }
        guard let scanned else {
            // Only a string with an escape is left to the parse.
            #expect(text.contains("\\"))
            return
        }
        let parsed = WireID(try JSONValue.parse(text))
        #expect(scanned == parsed)
        #expect(scanned.hashValue == parsed.hashValue)
        #expect(scanned._rawHashValue(seed: 12345) == parsed._rawHashValue(seed: 12345), "what a dictionary hashes")
        #expect(scanned.key == parsed.key)
    }

    /// A table of ids hashes each id's one hash mixed with the table's seed: every id is found
    /// again, equal ids collide only with themselves, and two seeds place the ids apart.
    @Test func aDictionaryOfManyIdsFindsEveryOne() {
        var table: [WireID: Int] = [:]
        for n in 0..<20_000 { table[WireID(key: n.isMultiple(of: 2) ? "\(n)" : "\"s\(n)\"")] = n }
        #expect(table.count == 20_000)
        for n in stride(from: 0, to: 20_000, by: 2) { table[WireID(key: "\(n)")] = nil }
        #expect(table.count == 10_000)
        #expect((0..<20_000).allSatisfy { n in table[WireID(key: n.isMultiple(of: 2) ? "\(n)" : "\"s\(n)\"")] == (n.isMultiple(of: 2) ? nil : n) })
        // 1,024 ids over 1,024 buckets fill 647 on average (1 - 1/e), 12 either way.
        let ids = (0..<1024).map { WireID(key: "\($0)") }
        #expect(Set(ids.map { $0._rawHashValue(seed: 1) & 1023 }).count > 550)
        #expect(ids.map { $0._rawHashValue(seed: 1) } != ids.map { $0._rawHashValue(seed: 2) })
    }
}
