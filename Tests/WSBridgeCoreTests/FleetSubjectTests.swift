import Testing
import WSBridgeCore

/// `fleet.subject` with `${msg:PATH}`: a subject per key.
struct FleetSubjectTests {
    static func subject(_ template: String, _ message: String) -> String? {
        guard let t = FleetSubject(template) else { return nil }
        var text = message
        return text.withUTF8 { t.subject(for: UnsafeRawBufferPointer($0)) }
    }

    @Test func eachPlaceholderIsTheMessagesValueAsOneToken() {
        #expect(Self.subject("feeds.binance.${msg:s}", #"{"e":"trade","s":"BTCUSDT","p":"1.5"}"#) == "feeds.binance.BTCUSDT")
        #expect(Self.subject("f.${msg:data.sym}.${msg:n}", #"{"data":{"sym":"ETH"},"n":7}"#) == "f.ETH.7")
        // Bytes a token cannot hold become _; a missing value, or no JSON, is _.
        #expect(Self.subject("f.${msg:s}", #"{"s":"BTC.USDT *>x"}"#) == "f.BTC_USDT___x")
        #expect(Self.subject("f.${msg:s}", #"{"other":1}"#) == "f._")
        #expect(Self.subject("f.${msg:s}", "not json") == "f._")
        // A key written with an escape: parsed instead of scanned.
        #expect(Self.subject("f.${msg:s}", #"{"\u0073":"SOL"}"#) == "f.SOL")
        #expect(FleetSubject("feeds.plain")?.isTemplate == false && FleetSubject("a.${msg:x}")?.isTemplate == true)
    }

    @Test func aBrokenPlaceholderIsRefused() {
        #expect(FleetSubject("f.${msg:s") == nil)
        #expect(FleetSubject("f.${env:s}") == nil)
        #expect(FleetSubject("f.${msg:}") == nil)
    }
}
