// glibc's `struct timespec` is claimed by whichever C module a clean build loads first (CSystemd
// or CWSBridgeLinux: both headers include <time.h>), so both are imported where it is used.
import CSystemd
import CWSBridgeLinux

#if canImport(Glibc)
    import Glibc
#endif

/// Wall-clock time for message timestamps (not for timers: those use the monotonic clock).
enum WallClock {
    static func millisecondsSinceEpoch() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }
}
