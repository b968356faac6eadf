// glibc's `struct timespec`/`struct tm` are claimed by whichever C module a clean build loads
// first (CSystemd or CWSBridgeLinux: both include <time.h>), so both are imported where used.
import CSystemd
import CWSBridgeLinux
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// A readable stderr log handler: `TIME LEVEL message {key=value ...}`, one line per entry.
///
/// Metadata keys listed in `quiet` are left out of the line (they are constant per process,
/// e.g. the upstream URL, and already in the startup line).
package struct ConsoleLogHandler: LogHandler {
    package var logLevel: Logger.Level
    package var metadata: Logger.Metadata = [:]
    package var metadataProvider: Logger.MetadataProvider?
    private let quiet: Set<String>

    package init(level: Logger.Level, quiet: Set<String> = ["upstream.url"]) {
        self.logLevel = level
        self.quiet = quiet
    }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.metadata[key] }
        set { self.metadata[key] = newValue }
    }

    package func log(event: LogEvent) {
        var merged = self.metadata
        if let provided = self.metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        var line = "\(Self.timestamp()) \(event.level.rawValue.padding(7)) \(event.message)"
        let shown = merged.filter { !self.quiet.contains($0.key) && !($0.key == "reason" || $0.key.hasPrefix("state.")) }
        if !shown.isEmpty {
            line += " {" + shown.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ") + "}"
        }
        line += "\n"
        line.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let n = write(2, bytes.baseAddress! + offset, bytes.count - offset)
                if n <= 0 { return }
                offset += n
            }
        }
    }

    static func timestamp() -> String {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        var seconds = ts.tv_sec
        var tm = tm()
        gmtime_r(&seconds, &tm)
        func pad(_ v: Int32, _ width: Int = 2) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        let millis = pad(Int32(ts.tv_nsec / 1_000_000), 3)
        return "\(tm.tm_year + 1900)-\(pad(tm.tm_mon + 1))-\(pad(tm.tm_mday))T\(pad(tm.tm_hour)):\(pad(tm.tm_min)):\(pad(tm.tm_sec)).\(millis)Z"
    }
}

extension String {
    fileprivate func padding(_ width: Int) -> String {
        self.count >= width ? self : self + String(repeating: " ", count: width - self.count)
    }
}
