import Testing
import WSBridgeProtocol

@Suite struct JSONTests {
    @Test func parsesAllKinds() throws {
        let v = try JSONValue.parse(#" {"a": [1, -2.5e2, true, false, null], "s": "x\"\\\/\n\u00e9\ud83d\ude00", "o": {}} "#)
        #expect(v["a"] == [1, -250, true, false, nil])
        #expect(v["s"] == .string("x\"\\/\né😀"))
        #expect(v["o"] == .object([]))
        #expect(v.value(at: "a.1") == .number(-250))
    }

    @Test func serializesCompactlyAndRoundTrips() throws {
        let v: JSONValue = ["type": "message", "n": 42, "f": 1.5, "s": "tab\there \"q\" \u{01}", "a": [true, nil]]
        #expect(v.serialized == #"{"type":"message","n":42,"f":1.5,"s":"tab\there \"q\" \u0001","a":[true,null]}"#)
        #expect(try JSONValue.parse(v.serialized) == v)
    }

    @Test(arguments: [
        ("", 0, "unexpected end of input"),
        ("{", 1, "expected a member name"),
        ("{\"a\" 1}", 5, "expected ':'"),
        ("{\"a\":1,}", 7, "expected a member name"),
        ("[1 2]", 3, "expected ',' or ']'"),
        ("nul", 3, "expected 'null'"),
        ("01", 0, "leading zeros"),
        ("\"abc", 4, "unterminated string"),
        ("\"a\u{01}\"", 2, "control character"),
        ("\"\\x\"", 2, "invalid escape"),
        ("\"\\ud800\"", 7, "lone high surrogate"),
        ("{} x", 3, "unexpected data after"),
        ("@", 0, "unexpected character '@'"),
    ])
    func errorsSayWhereAndWhat(_ text: String, _ offset: Int, _ problem: String) {
        #expect {
            _ = try JSONValue.parse(text)
        } throws: { error in
            guard let e = error as? JSONParseError else { return false }
            return e.offset == offset && e.problem.contains(problem)
        }
    }

    /// A routed message goes to its app as the server's bytes only when its view would be
    /// written as the same text: `==` is not that test (it compares numbers by value and strings
    /// by Unicode equivalence).
    @Test func serializesLikeComparesTheTextNotTheValue() throws {
        let a = try JSONValue.parse(#"{"id":1,"result":{"p":"x\u00e9","l":[1,true,null]}}"#)
        #expect(a.serializesLike(try JSONValue.parse(#"{"id": 1, "result": {"p": "xé", "l": [1, true, null]}}"#)))
        #expect(!a.serializesLike(try JSONValue.parse(#"{"id":1.0,"result":{"p":"xé","l":[1,true,null]}}"#)))
        #expect(a == (try JSONValue.parse(#"{"id":1.0,"result":{"p":"xé","l":[1,true,null]}}"#)))
        // "é" as e and a combining accent: equal as Swift strings, not as bytes.
        let decomposed = JSONValue.object([("id", 1), ("result", .object([("p", .string("xe\u{301}")), ("l", [1, true, nil])]))])
        #expect(a == decomposed && !a.serializesLike(decomposed))
        #expect(!a.serializesLike(try JSONValue.parse(#"{"result":{"p":"xé","l":[1,true,null]},"id":1}"#)))
        #expect(!a.serializesLike(try JSONValue.parse(#"{"id":1,"result":{"p":"xé","l":[1,true]}}"#)))
        #expect(!JSONValue.string("1").serializesLike(1) && JSONValue.null.serializesLike(nil))
    }

    @Test func depthIsBounded() {
        let deep = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        #expect(throws: JSONParseError.self) { try JSONValue.parse(deep) }
    }
}
