import NIOCore
import Testing
import WSBridgeProtocol

@testable import WSBridgeDaemon

/// `fleet.standby = "hot"`: the id every bridge gives the same message, taken from it.
struct FleetMessageIDTests {
    static func id(_ text: String, _ paths: [String]) -> String {
        FleetPublisher.messageID(ByteBuffer(string: text), paths: paths.map { JSONPathScan.Path(JSONValue.PathComponent.split($0)) })
    }

    @Test func theIdIsTheValuesAtThePaths() {
        #expect(Self.id(#"{"s":"BTCUSDT","E":1700000000123,"p":"1.5"}"#, ["s", "E"]) == #"v-"BTCUSDT"|1700000000123"#)
        #expect(Self.id(#"{"tick":12,"pad":"xx"}"#, ["tick"]) == "v-12")
        // Members in another order, other members: the same id.
        #expect(Self.id(#"{"pad":"yy","tick":12}"#, ["tick"]) == "v-12")
    }

    /// A long value, or one with spaces, goes by its digest; a message without the path by the
    /// digest of its bytes. Fixed values: every process computes the same (no per-process seed).
    @Test func aLongValueOrAMessageWithoutThePathGoesByAFixedDigest() {
        let long = Self.id(#"{"k":"\#(String(repeating: "a", count: 200))"}"#, ["k"])
        #expect(long.hasPrefix("d-") && long == Self.id(#"{"k":"\#(String(repeating: "a", count: 200))","x":1}"#, ["k"]))
        #expect(Self.id(#"{"k":"a b"}"#, ["k"]).hasPrefix("d-"))
        let missing = Self.id(#"{"other":1}"#, ["k"])
        // FNV-1a 64 from two offsets over the bytes, then a separator byte (computed apart).
        #expect(missing == "m-d56be7ae2959f05b36d3b239e7ef391", "\(missing)")
        #expect(missing == Self.id(#"{"other":1}"#, ["k"]) && missing != Self.id(#"{"other":2}"#, ["k"]))
    }
}
