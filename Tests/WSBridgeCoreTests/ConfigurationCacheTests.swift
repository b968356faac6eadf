import Testing
import WSBridgeCore

/// A text seen before is not parsed again (TOMLKit frees no parse); its error neither.
@Suite struct ConfigurationCacheTests {
    static let text = "[upstream]\nurl = \"ws://127.0.0.1:9/\"\n"

    @Test func aTextSeenBeforeIsNotParsedAgain() throws {
        let cache = ConfigurationCache(capacity: 2)
        let first = try cache.load(text: Self.text, fileName: "a.toml")
        let again = try cache.load(text: Self.text, fileName: "a.toml")
        #expect(first == again)
        #expect(cache.parses == 1)
        // The same text under another file name is parsed: errors name the file.
        _ = try cache.load(text: Self.text, fileName: "b.toml")
        #expect(cache.parses == 2)
    }

    @Test func anErrorIsKeptToo() {
        let cache = ConfigurationCache(capacity: 2)
        let broken = "[heartbeat]\ninterval = \"soon\"\n"
        #expect(throws: ConfigurationError.self) { try cache.load(text: broken, fileName: "a.toml") }
        #expect(throws: ConfigurationError.self) { try cache.load(text: broken, fileName: "a.toml") }
        #expect(cache.parses == 1)
    }

    @Test func theOldestTextLeavesWhenFull() throws {
        let cache = ConfigurationCache(capacity: 2)
        for port in [1, 2, 3] {
            _ = try cache.load(text: "[upstream]\nurl = \"ws://127.0.0.1:\(port)/\"\n", fileName: "a.toml")
        }
        #expect(cache.parses == 3)
        // 2 and 3 are kept; 1 left and is parsed again.
        _ = try cache.load(text: "[upstream]\nurl = \"ws://127.0.0.1:3/\"\n", fileName: "a.toml")
        #expect(cache.parses == 3)
        _ = try cache.load(text: "[upstream]\nurl = \"ws://127.0.0.1:1/\"\n", fileName: "a.toml")
        #expect(cache.parses == 4)
    }
}
