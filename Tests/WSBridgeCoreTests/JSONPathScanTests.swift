import Testing
import WSBridgeProtocol

@Suite struct JSONPathScanTests {
    static func scan(_ path: String, _ text: String) -> JSONPathScan {
        Array(text.utf8).withUnsafeBytes { JSONPathScan.scan(JSONValue.PathComponent.split(path), in: $0) }
    }

    /// The text of what the scan found, or its outcome.
    static func found(_ path: String, _ text: String) -> String {
        switch Self.scan(path, text) {
        case .found(let range): String(decoding: Array(text.utf8)[range], as: UTF8.self)
        case .missing: "missing"
        case .unsure: "unsure"
        }
    }

    @Test func findsTheValueAtAPathWithoutReadingPastIt() {
        let trade = #"{"stream":"btcusdt@trade","data":{"e":"trade","E":1,"s":"BTCUSDT","t":12345,"p":"0.1","q":[1,{"x":"}"}],"u":400900217}}"#
        #expect(Self.found("stream", trade) == #""btcusdt@trade""#)
        #expect(Self.found("data.u", trade) == "400900217")
        #expect(Self.found("data.q.1.x", trade) == #""}""#)
        #expect(Self.found("data.q", trade) == #"[1,{"x":"}"}]"#)
        #expect(Self.found("data", " { \"data\" :\t{\"a\" : true } } ") == #"{"a" : true }"#)
        #expect(Self.found("a", #"{"a":"say \"hi\"","b":2}"#) == #""say \"hi\"""#)
        // What is not there.
        #expect(Self.found("data.v", trade) == "missing")
        #expect(Self.found("stream.x", trade) == "missing")
        #expect(Self.found("data.q.2", trade) == "missing")
        #expect(Self.found("data.q.x", trade) == "missing")
        #expect(Self.found("a", "{}") == "missing" && Self.found("0", "[]") == "missing" && Self.found("a", "7") == "missing")
        // The first member of a key (a parse keeps the last).
        #expect(Self.found("a", #"{"a":1,"b":{"a":3},"a":2}"#) == "1")
        // What it cannot tell: a key written with an escape, text that is not JSON where it reads.
        #expect(Self.found("a", #"{"\u0061":1}"#) == "unsure")
        #expect(Self.found("a", #"{"b":1"#) == "unsure")
        // What comes after the value is not read: the text ends there, or is not JSON.
        #expect(Self.found("a", #"{"a":1"#) == "1" && Self.found("a", #"{"a":[2] !"#) == "[2]")
        #expect(Self.found("a", #"{"a" 1}"#) == "unsure")
        #expect(Self.found("a", #"{"b":{"c":1}"#) == "unsure")
        #expect(Self.found("a", "") == "unsure")
        // A name whose bytes are not UTF-8, which a parse reads as U+FFFD (found by the fuzzer).
        let repaired = [UInt8](#"{"o"#.utf8) + [0xFF, 0xFF] + [UInt8](#"p":1}"#.utf8)
        guard case .object(let members)? = try? JSONValue.parse(repaired), let key = members.first?.0 else {
            Issue.record("the parser did not read the repaired name")
            return
        }
        #expect(key.unicodeScalars.contains("\u{FFFD}"))
        #expect(repaired.withUnsafeBytes { JSONPathScan.scan([.init(key)], in: $0) } == .unsure)
    }

    /// Against the parser, on random JSON: at every path in it and some that are not, the scan
    /// finds the bytes of the value a parse finds there (or says it is missing); objects whose
    /// keys repeat are left out (the scan takes the first, a parse the last).
    @Test func agreesWithTheParserOnRandomJSON() throws {
        var random = SeededGenerator(seed: 44)
        var checked = 0
        var objects = 0
        for _ in 0..<1000 {
            let value = Self.randomValue(depth: 0, &random)
            let text = value.serialized
            let parsed = try JSONValue.parse(text)
            for path in Self.paths(in: parsed) + [["nope"], ["0", "nope"]] {
                let components = path.map(JSONValue.PathComponent.init)
                let expected = parsed.value(at: components)
                let scanned = Array(text.utf8).withUnsafeBytes { JSONPathScan.scan(components, in: $0) }
                switch scanned {
                case .found(let range):
                    let bytes = Array(text.utf8)[range]
                    #expect(try JSONValue.parse(bytes).serialized == expected?.serialized, "\(text) at \(path)")
                case .missing:
                    #expect(expected == nil, "\(text) at \(path)")
                case .unsure:
                    Issue.record("unsure on valid JSON written without escapes in keys: \(text) at \(path)")
                }
                checked += 1
            }
            // The walk of an object's members: each name and value, in order, and a stop.
            if case .object(let members) = parsed {
                var seen: [(String, String)] = []
                let walked = Array(text.utf8).withUnsafeBytes { bytes in
                    JSONPathScan.members(in: bytes) { name, value in
                        seen.append((String(decoding: name, as: UTF8.self), String(decoding: bytes[value], as: UTF8.self)))
                        return false
                    }
                }
                #expect(walked, "\(text)")
                #expect(seen.map(\.0) == members.map(\.0), "\(text)")
                for ((_, raw), (_, value)) in zip(seen, members) { #expect(try JSONValue.parse(raw).serialized == value.serialized, "\(text)") }
                if members.count > 1 {
                    var visits = 0
                    _ = Array(text.utf8).withUnsafeBytes {
                        JSONPathScan.members(in: $0) { _, _ in
                            visits += 1
                            return true
                        }
                    }
                    #expect(visits == 1)
                }
                objects += 1
            }
        }
        #expect(checked > 2000)
        #expect(objects > 100)
    }

    static func paths(in value: JSONValue, prefix: [String] = []) -> [[String]] {
        switch value {
        case .object(let members):
            return members.flatMap { [prefix + [$0.0]] + Self.paths(in: $0.1, prefix: prefix + [$0.0]) }
        case .array(let items):
            return items.indices.flatMap { [prefix + ["\($0)"]] + Self.paths(in: items[$0], prefix: prefix + ["\($0)"]) }
        default:
            return []
        }
    }

    static func randomValue(depth: Int, _ random: inout SeededGenerator) -> JSONValue {
        let keys = ["a", "b", "stream", "data", "u", "x y", "1"]
        let strings = ["", "}", "]", ",", "\"", "\\", "a\"b", "{\"k\":1}", "é", "\n"]
        switch Int.random(in: 0..<(depth > 3 ? 4 : 6), using: &random) {
        case 0: return .string(strings.randomElement(using: &random)!)
        case 1: return .number(JSONNumber(Int.random(in: -1000...1000, using: &random)))
        case 2: return Bool.random(using: &random) ? .bool(true) : .null
        case 3: return (try? JSONValue.parse("\(Int.random(in: 0...99, using: &random)).125e-3")) ?? .null
        case 4:
            let names = Array(keys.shuffled(using: &random).prefix(Int.random(in: 0...4, using: &random)))
            return .object(names.map { ($0, Self.randomValue(depth: depth + 1, &random)) })
        default:
            return .array((0..<Int.random(in: 0...4, using: &random)).map { _ in Self.randomValue(depth: depth + 1, &random) })
        }
    }
}
