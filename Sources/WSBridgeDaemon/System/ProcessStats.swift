#if canImport(Glibc)
    import Glibc
#endif

/// The process collector's figures (`process_*`, as Prometheus' client libraries name them),
/// read from /proc when metrics are rendered: CPU time, memory, file descriptors, start time.
package struct ProcessStats: Sendable, Equatable {
    package var cpuSeconds: Double
    package var residentBytes: Int
    package var virtualBytes: Int
    package var openFDs: Int
    package var maxFDs: Int
    /// Seconds since the Unix epoch.
    package var startTime: Double

    /// Nil where /proc cannot be read (the figures are then left out, not made up).
    package static func read() -> ProcessStats? {
        guard let stat = Self.readFile("/proc/self/stat"), let close = stat.lastIndex(of: UInt8(ascii: ")")) else { return nil }
        // Fields after "(comm)": state is field 3; utime 14, stime 15, starttime 22, vsize 23, rss 24.
        let fields = stat[(close + 2)...].split(separator: UInt8(ascii: " ")).map { Int(String(decoding: $0, as: UTF8.self)) ?? 0 }
        guard fields.count >= 22 else { return nil }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        let page = sysconf(Int32(_SC_PAGESIZE))
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        return ProcessStats(
            cpuSeconds: Double(fields[11] + fields[12]) / ticks,
            residentBytes: fields[21] * page,
            virtualBytes: fields[20],
            openFDs: Self.countFDs(),
            maxFDs: Int(clamping: limit.rlim_cur),
            startTime: Self.startTime(ticksSinceBoot: fields[19], ticks: ticks)
        )
    }

    /// The boot time never changes: /proc/stat (its `btime`) is read at the first scrape only
    /// (a static let is initialized once, on first use).
    private static let bootSeconds = Self.bootTime()

    private static func startTime(ticksSinceBoot: Int, ticks: Double) -> Double {
        Double(Self.bootSeconds) + Double(ticksSinceBoot) / ticks
    }

    private static func readFile(_ path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { Glibc.close(fd) }
        var bytes = [UInt8](repeating: 0, count: 4096)
        let n = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        return n > 0 ? Array(bytes.prefix(n)) : nil
    }

    private static func countFDs() -> Int {
        guard let dir = opendir("/proc/self/fd") else { return 0 }
        defer { closedir(dir) }
        var count = 0
        while let entry = readdir(dir) {
            if entry.pointee.d_name.0 != UInt8(ascii: ".") { count += 1 }
        }
        return count - 1  // the directory's own descriptor
    }

    /// The boot time, from /proc/stat's `btime` line (seconds since the epoch).
    private static func bootTime() -> Int {
        let fd = open("/proc/stat", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return 0 }
        defer { Glibc.close(fd) }
        var text: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 8192)
        while text.count < 1 << 20 {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            text += chunk.prefix(n)
        }
        for line in text.split(separator: UInt8(ascii: "\n")) where line.starts(with: Array("btime ".utf8)) {
            return Int(String(decoding: line.dropFirst(6), as: UTF8.self)) ?? 0
        }
        return 0
    }
}
