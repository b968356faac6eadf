import NIOCore
import Testing

@testable import WSBridgeDaemon

/// `${last:PATH}`: the value at PATH in the last upstream message that had it, exactly as
/// received, whatever came after it in the same read; what it holds between reads is bounded.
@Suite struct LastValuesTests {
    @Test func theNewestMessageWithThePathWinsExactly() {
        var values = LastValues(paths: ["offset", "data.seq"])
        values.observe(ByteBuffer(string: #"{"offset":18446744073709551617,"data":{"seq":"a7"}}"#))
        values.observe(ByteBuffer(string: #"{"offset":2.50}"#))
        // Mentions "offset" but does not have the path: the earlier value stands.
        values.observe(ByteBuffer(string: #"{"note":"no \"offset\" here"}"#))
        values.observe(ByteBuffer(string: "not json"))
        values.resolve()
        #expect(values.values == ["offset": "2.50", "data.seq": #""a7""#])
    }

    @Test func manyOrLargeCandidatesResolveEarlyAndStayExact() {
        var values = LastValues(paths: ["offset"])
        for n in 1...(LastValues.maxCandidates * 3) {
            values.observe(ByteBuffer(string: #"{"offset":\#(n)}"#))
        }
        // Resolved without waiting for the end of the read: the newest full batch is settled.
        #expect(values.values["offset"] == "\(LastValues.maxCandidates * 3)")
        let big = String(repeating: "x", count: LastValues.maxCandidateBytes)
        values.observe(ByteBuffer(string: #"{"offset":7,"pad":"\#(big)"}"#))
        #expect(values.values["offset"] == "7")
        values.observe(ByteBuffer(string: #"{"offset":8}"#))
        values.resolve()
        #expect(values.values["offset"] == "8")
    }
}
