/// Exponential backoff with full jitter: `sleep = random(0, min(cap, base · 2^attempt))`.
///
/// Pure: the random source is passed in, so tests use a seeded generator.
public struct BackoffPolicy: Sendable, Equatable {
    public var base: Duration
    public var cap: Duration
    /// The attempt count resets only once a link has stayed open this long.
    public var stableAfter: Duration

    public init(base: Duration = .milliseconds(500), cap: Duration = .seconds(60), stableAfter: Duration = .seconds(30)) {
        self.base = base
        self.cap = cap
        self.stableAfter = stableAfter
    }

    /// The upper bound of the delay before retry number `attempt` (0 for the first retry).
    /// Computed in a way that cannot overflow: the cap is applied before the exponent grows.
    public func ceiling(attempt: Int) -> Duration {
        let baseNs = max(self.base.nanoseconds, 0)
        let capNs = max(self.cap.nanoseconds, 0)
        guard baseNs > 0 else { return .zero }
        var value = baseNs
        var n = max(attempt, 0)
        while n > 0 && value < capNs {
            value = value > capNs / 2 ? capNs : value * 2
            n -= 1
        }
        return .nanoseconds(min(value, capNs))
    }

    /// A full-jitter delay for retry number `attempt`, uniformly in `0 ... ceiling(attempt)`.
    public func delay(attempt: Int, using generator: inout some RandomNumberGenerator) -> Duration {
        let ceiling = self.ceiling(attempt: attempt).nanoseconds
        guard ceiling > 0 else { return .zero }
        return .nanoseconds(Int64.random(in: 0...ceiling, using: &generator))
    }
}

extension Duration {
    /// The whole duration in nanoseconds, saturating at Int64's range.
    public var nanoseconds: Int64 {
        let (seconds, attoseconds) = self.components
        let (ns, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        let (total, overflow2) = ns.addingReportingOverflow(attoseconds / 1_000_000_000)
        if overflow2 { return seconds < 0 ? .min : .max }
        return total
    }

    /// Seconds as a floating-point number, for logs and status.
    public var seconds: Double {
        Double(self.nanoseconds) / 1e9
    }

    /// A short human form: "750ms", "20s", "1.5s".
    public var short: String {
        let ns = self.nanoseconds
        if ns < 1_000_000 { return "\(Double(ns) / 1000)µs" }
        if ns < 1_000_000_000 {
            let ms = Double(ns) / 1e6
            return ms == ms.rounded() ? "\(Int(ms))ms" : "\((ms * 10).rounded() / 10)ms"
        }
        let s = Double(ns) / 1e9
        return s == s.rounded() ? "\(Int(s))s" : "\((s * 1000).rounded() / 1000)s"
    }
}
