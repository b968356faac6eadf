import CSystemd
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// A swift-log handler that writes structured journald entries through `sd_journal_sendv`:
/// MESSAGE, PRIORITY, SYSLOG_IDENTIFIER, CODE_FILE/CODE_LINE/CODE_FUNC, and each metadata key
/// as a field (`upstream.url` → `UPSTREAM_URL`). Used when JOURNAL_STREAM says stderr is the
/// journal; if the journal cannot be reached, the entry goes to stderr instead.
package struct JournalLogHandler: LogHandler {
    package var logLevel: Logger.Level
    package var metadata: Logger.Metadata = [:]
    package var metadataProvider: Logger.MetadataProvider?
    private let identifier: String
    private let fallback: ConsoleLogHandler

    package init(identifier: String, level: Logger.Level) {
        self.identifier = identifier
        self.logLevel = level
        self.fallback = ConsoleLogHandler(level: level)
    }

    /// True when systemd connected stderr to the journal (JOURNAL_STREAM names stderr's device and inode).
    package static var stderrIsJournal: Bool {
        guard let value = getenv("JOURNAL_STREAM") else { return false }
        let parts = String(cString: value).split(separator: ":")
        guard parts.count == 2, let dev = UInt64(parts[0]), let ino = UInt64(parts[1]) else { return false }
        var st = stat()
        guard fstat(2, &st) == 0 else { return false }
        return UInt64(st.st_dev) == dev && UInt64(st.st_ino) == ino
    }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.metadata[key] }
        set { self.metadata[key] = newValue }
    }

    static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    /// `upstream.url` → `UPSTREAM_URL`: journald field names are A-Z, 0-9 and _, not starting with _.
    static func fieldName(_ key: String) -> String {
        var name = String(
            key.uppercased().map { c -> Character in
                (c.isASCII && (c.isLetter || c.isNumber)) ? c : "_"
            })
        while name.hasPrefix("_") { name.removeFirst() }
        if name.isEmpty || name.first!.isNumber { name = "F" + name }
        return String(name.prefix(64))
    }

    package func log(event: LogEvent) {
        var merged = self.metadata
        if let provided = self.metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        var fields = [
            "MESSAGE=\(event.message)",
            "PRIORITY=\(Self.priority(event.level))",
            "SYSLOG_IDENTIFIER=\(self.identifier)",
            "CODE_FILE=\(event.file)",
            "CODE_LINE=\(event.line)",
            "CODE_FUNC=\(event.function)",
            "LOGGER_SOURCE=\(event.source)",
        ]
        for (key, value) in merged.sorted(by: { $0.key < $1.key }) {
            fields.append("\(Self.fieldName(key))=\(value)")
        }
        if Self.send(fields) < 0 {
            self.fallback.log(event: event)
        }
    }

    /// Sends one entry; each field may contain newlines (sd_journal_sendv handles them).
    static func send(_ fields: [String]) -> Int32 {
        // One contiguous buffer, so every iovec points into memory valid for the whole call.
        var bytes: [UInt8] = []
        var ranges: [Range<Int>] = []
        for field in fields {
            let start = bytes.count
            bytes.append(contentsOf: field.utf8)
            ranges.append(start..<bytes.count)
        }
        return bytes.withUnsafeMutableBytes { raw -> Int32 in
            let iovecs = ranges.map { r in
                iovec(iov_base: raw.baseAddress.map { $0 + r.lowerBound }, iov_len: r.count)
            }
            return sd_journal_sendv(iovecs, Int32(iovecs.count))
        }
    }
}
