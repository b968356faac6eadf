import Testing
import WSBridgeProtocol

@Suite struct SuggestionTests {
    @Test func theClosestNameWithinAThirdOfTheLength() {
        #expect(Suggestion.closest(to: "stauts", in: ["status", "send", "tail"]) == "status")
        #expect(Suggestion.closest(to: "subscriber_qeue", in: ["subscriber_queue", "subscriber_queue_bytes"]) == "subscriber_queue")
        #expect(Suggestion.closest(to: "SEND", in: ["status", "send"]) == "send")
        #expect(Suggestion.closest(to: "frobnicate", in: ["status", "send"]) == nil)
        #expect(Suggestion.closest(to: "x", in: ["status"]) == nil)
    }
}
