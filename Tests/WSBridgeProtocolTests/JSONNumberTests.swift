import Testing
import WSBridgeProtocol

@Suite struct JSONNumberTests {
    static let exact = [
        "1234567890123456789", "-9223372036854775808", "18446744073709551615", "123456789012345678901234567890",
        "0.1234567890123456789012345678901234567890", "1e999", "-1E-400", "1.50", "0", "-0", "2.0e+10",
    ]

    @Test(arguments: exact)
    func numbersKeepTheirTextThroughParseAndSerialize(_ text: String) throws {
        let line = #"{"n":\#(text),"a":[\#(text)]}"#
        let value = try JSONValue.parse(line)
        #expect(value.serialized == line)
        #expect(value["n"] == .number(JSONNumber(text)!))
    }

    @Test func equalityIsByExactDecimalValue() throws {
        func n(_ t: String) throws -> JSONValue { try JSONValue.parse(t) }
        #expect(try n("1") == n("1.0"))
        #expect(try n("100") == n("1e2"))
        #expect(try n("0.05") == n("5E-2"))
        #expect(try n("-0") == n("0.000"))
        #expect(try n("1234567890123456789") != n("1234567890123456788"))
        #expect(try n("0.1234567890123456789012345678901234567890") != n("0.1234567890123456789012345678901234567891"))
        #expect(try n("1e999") != n("1e998"))
        #expect(try n("-1") != n("1"))
        // Doubles would call these equal.
        #expect(Double("1234567890123456789") == Double("1234567890123456788"))
    }

    @Test func aFilterTellsNeighbouring64BitIdsApart() throws {
        let filter = Filter(field: "id", equals: try JSONValue.parse("1234567890123456789"))
        #expect(filter.matches(try JSONValue.parse(#"{"id":1234567890123456789}"#)))
        #expect(filter.matches(try JSONValue.parse(#"{"id":1.234567890123456789e18}"#)))
        #expect(!filter.matches(try JSONValue.parse(#"{"id":1234567890123456788}"#)))
    }

    @Test func integerAccessIsExactOrNil() throws {
        #expect(try JSONValue.parse("9007199254740993").intValue == 9_007_199_254_740_993)
        #expect(try JSONValue.parse("1.2e1").intValue == 12)
        #expect(try JSONValue.parse("12.5").intValue == nil)
        #expect(try JSONValue.parse("1e30").intValue == nil)
        #expect(JSONValue.number(JSONNumber(UInt64.max)).serialized == "18446744073709551615")
        #expect(JSONValue.number(JSONNumber(0.25)).serialized == "0.25")
        #expect(JSONValue.number(JSONNumber(1e15)).serialized == "1000000000000000")
        #expect(JSONValue.number(JSONNumber(1e300)).serialized == "1e+300")
        #expect(JSONNumber("1 2") == nil)
    }
}
