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
}
