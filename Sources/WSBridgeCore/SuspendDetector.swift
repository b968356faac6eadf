/// Notices a suspend/resume from the gap between CLOCK_BOOTTIME (counts suspended time) and
/// CLOCK_MONOTONIC (does not). Pure: the caller passes the current gap in.
package struct SuspendDetector: Sendable {
    private var lastGap: Duration
    /// Gaps growing by less than this are clock noise, not a suspend.
    package var threshold: Duration

    package init(gap: Duration, threshold: Duration = .seconds(2)) {
        self.lastGap = gap
        self.threshold = threshold
    }

    /// Returns how long the machine slept since the previous observation, if it did.
    package mutating func observe(gap: Duration) -> Duration? {
        let slept = gap - self.lastGap
        self.lastGap = gap
        return slept > self.threshold ? slept : nil
    }
}
