import WSBridgeCore

/// A deterministic generator (SplitMix64) so backoff tests are repeatable.
struct SeededGenerator: RandomNumberGenerator, Sendable {
    var state: UInt64
    init(seed: UInt64) { self.state = seed }
    mutating func next() -> UInt64 {
        self.state &+= 0x9E37_79B9_7F4A_7C15
        var z = self.state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Always returns the maximum: full jitter then yields exactly the ceiling.
struct MaxGenerator: RandomNumberGenerator, Sendable {
    mutating func next() -> UInt64 { .max }
}

/// The instant `seconds` after an arbitrary origin, for state-machine tests.
func t(_ seconds: Double) -> MonotonicInstant {
    MonotonicInstant(nanoseconds: UInt64(1_000_000_000_000 + seconds * 1e9))
}
