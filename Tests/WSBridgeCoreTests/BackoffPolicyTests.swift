import Testing
import WSBridgeCore

@Suite struct BackoffPolicyTests {
    let policy = BackoffPolicy(base: .milliseconds(500), cap: .seconds(60), stableAfter: .seconds(30))

    @Test func ceilingDoublesFromBaseUntilCap() {
        #expect(self.policy.ceiling(attempt: 0) == .milliseconds(500))
        #expect(self.policy.ceiling(attempt: 1) == .seconds(1))
        #expect(self.policy.ceiling(attempt: 2) == .seconds(2))
        #expect(self.policy.ceiling(attempt: 6) == .seconds(32))
        #expect(self.policy.ceiling(attempt: 7) == .seconds(60))
        #expect(self.policy.ceiling(attempt: 8) == .seconds(60))
    }

    @Test func hugeAttemptCountsDoNotOverflow() {
        #expect(self.policy.ceiling(attempt: 10_000) == .seconds(60))
        #expect(self.policy.ceiling(attempt: Int.max) == .seconds(60))
        #expect(self.policy.ceiling(attempt: -3) == .milliseconds(500))
    }

    @Test func fullJitterStaysWithinZeroAndCeiling() {
        var generator = SeededGenerator(seed: 42)
        for attempt in 0..<20 {
            var seen: [Duration] = []
            for _ in 0..<200 {
                let d = self.policy.delay(attempt: attempt, using: &generator)
                #expect(d >= .zero)
                #expect(d <= self.policy.ceiling(attempt: attempt))
                seen.append(d)
            }
            // Full jitter spreads over the whole range: some delay below a quarter of the ceiling.
            #expect(seen.contains { $0 < self.policy.ceiling(attempt: attempt) / 4 })
            #expect(seen.contains { $0 > self.policy.ceiling(attempt: attempt) * 3 / 4 })
        }
    }

    @Test func maximumRandomValueYieldsTheCeiling() {
        var generator = MaxGenerator()
        #expect(self.policy.delay(attempt: 3, using: &generator) <= .seconds(4))
        #expect(self.policy.delay(attempt: 3, using: &generator) > .milliseconds(3900))
    }

    @Test func zeroBaseMeansNoDelay() {
        var generator = SeededGenerator(seed: 1)
        let p = BackoffPolicy(base: .zero, cap: .seconds(1))
        #expect(p.delay(attempt: 5, using: &generator) == .zero)
    }
}
