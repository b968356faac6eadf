/// Notices a suspend/resume from the gap between CLOCK_BOOTTIME (counts suspended time) and
/// CLOCK_MONOTONIC (does not). Pure: the caller passes the current gap in.
public struct SuspendDetector: Sendable {
    private var lastGap: Duration
    /// Gaps growing by less than this are clock noise, not a suspend.
    public var threshold: Duration

    public init(gap: Duration, threshold: Duration = .seconds(2)) {
        self.lastGap = gap
        self.threshold = threshold
    }

    /// Returns how long the machine slept since the previous observation, if it did.
    public mutating func observe(gap: Duration) -> Duration? {
        let slept = gap - self.lastGap
        self.lastGap = gap
        return slept > self.threshold ? slept : nil
    }
}
