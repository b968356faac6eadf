import Testing
import WSBridgeProtocol

/// `prefix` and `contains`: filters on the whole text, JSON or not.
@Suite struct WholeTextFilterTests {
    @Test func prefixAndContainsTestTheBytes() throws {
        #expect(Filter(.prefix("42[")).matches(json: nil, text: Array(#"42["ev",1]"#.utf8)))
        #expect(!Filter(.prefix("42[")).matches(json: nil, text: Array("2".utf8)))
        #expect(Filter(.contains("BTC")).matches(json: nil, text: Array("MSG BTC.x 1 0".utf8)))
        #expect(Filter(.contains("BTC")).matches(json: nil, text: Array("BBTC".utf8)))
        #expect(!Filter(.contains("BTC")).matches(json: nil, text: Array("BT C".utf8)))
        // A field filter needs the JSON.
        #expect(!Filter(field: "a", equals: nil).matches(json: nil, text: Array(#"{"a":1}"#.utf8)))
    }

    @Test func theyTravelAsSubscribeFilters() throws {
        let request = try Request.decode(try JSONValue.parse(#"{"op":"subscribe","filter":{"contains":"BTC"}}"#))
        #expect(request.command == .subscribe(filter: Filter(.contains("BTC")), since: nil, stream: nil))
        #expect(Filter(.prefix("x")).json == ["prefix": "x"])
        // "all" (the wire as it is) takes a filter, never a since.
        #expect(
            try Request.decode(try JSONValue.parse(#"{"op":"subscribe","all":true}"#)).command == .subscribe(filter: nil, since: nil, stream: nil, all: true))
        #expect(
            try Request.decode(try JSONValue.parse(#"{"op":"subscribe","all":true,"filter":{"contains":"x"}}"#)).command
                == .subscribe(filter: Filter(.contains("x")), since: nil, stream: nil, all: true))
        #expect(throws: ProtocolError.self) { try Request.decode(try JSONValue.parse(#"{"op":"subscribe","all":true,"since":3}"#)) }
        #expect(throws: ProtocolError.self) { try Request.decode(try JSONValue.parse(#"{"op":"subscribe","filter":{"prefix":""}}"#)) }
        #expect(throws: ProtocolError.self) {
            try Request.decode(try JSONValue.parse(#"{"op":"request","text":"q","match":{"prefix":"x"}}"#))
        }
    }
}
