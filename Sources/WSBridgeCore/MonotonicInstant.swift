/// A point on the monotonic clock, in nanoseconds since an arbitrary origin.
///
/// State machines take time as an input (`now:`) and never read a clock themselves, so their
/// tests can move time by hand.
public struct MonotonicInstant: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var nanoseconds: UInt64

    public init(nanoseconds: UInt64) {
        self.nanoseconds = nanoseconds
    }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.nanoseconds < rhs.nanoseconds }

    public static func + (lhs: Self, rhs: Duration) -> Self {
        let d = rhs.nanoseconds
        if d >= 0 {
            let (sum, overflow) = lhs.nanoseconds.addingReportingOverflow(UInt64(d))
            return Self(nanoseconds: overflow ? .max : sum)
        }
        let m = UInt64(-(d + 1)) + 1
        return Self(nanoseconds: lhs.nanoseconds > m ? lhs.nanoseconds - m : 0)
    }

    /// The duration from `rhs` to `lhs` (negative if `lhs` is earlier).
    public static func - (lhs: Self, rhs: Self) -> Duration {
        if lhs.nanoseconds >= rhs.nanoseconds {
            return .nanoseconds(Int64(clamping: lhs.nanoseconds - rhs.nanoseconds))
        }
        return .nanoseconds(-Int64(clamping: rhs.nanoseconds - lhs.nanoseconds))
    }

    public var description: String { "t+\(Duration.nanoseconds(Int64(clamping: self.nanoseconds)).short)" }
}
