import Testing
import WSBridgeCore

@Suite struct SuspendDetectorTests {
    @Test func reportsSleepOnlyWhenTheGapGrows() {
        var d = SuspendDetector(gap: .seconds(100))
        #expect(d.observe(gap: .seconds(100)) == nil)
        #expect(d.observe(gap: .milliseconds(101_500)) == nil)  // 1.5 s: noise threshold is 2 s
        #expect(d.observe(gap: .seconds(400)) == .milliseconds(298_500))
        #expect(d.observe(gap: .seconds(400)) == nil)
    }
}
