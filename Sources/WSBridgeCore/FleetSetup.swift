/// What `wsbridged --fleet-init` makes from `[fleet]` (docs/fleet.md, step 2), and how what it
/// finds differs from it. Pure: the NATS side is `FleetInit` in the daemon.
public struct FleetSetup: Sendable, Equatable {
    /// The stream's settings that `[fleet]` decides.
    public struct Stream: Sendable, Equatable {
        public var subjects: [String]
        public var replicas: Int
        public var duplicateWindow: Duration
        public var fileStorage: Bool

        public init(subjects: [String], replicas: Int, duplicateWindow: Duration, fileStorage: Bool) {
            self.subjects = subjects
            self.replicas = replicas
            self.duplicateWindow = duplicateWindow
            self.fileStorage = fileStorage
        }

        public var description: String {
            "subjects \(self.subjects.joined(separator: ", ")), \(self.fileStorage ? "file" : "memory") storage, \(self.replicas) replica\(self.replicas == 1 ? "" : "s"), duplicate window \(self.duplicateWindow.short)"
        }

        /// How `found` differs from this, each said with the key that sets it: empty when it will do.
        /// A stream whose subjects cover this one's will do.
        public func differences(_ found: Stream) -> [String] {
            var out: [String] = []
            for subject in self.subjects where !found.subjects.contains(where: { FleetSetup.covers($0, subject) }) {
                out.append("its subjects (\(found.subjects.joined(separator: ", "))) do not take \(subject) (fleet.subject)")
            }
            if found.replicas != self.replicas { out.append("\(found.replicas) replica(s) (fleet.replicas = \(self.replicas))") }
            if found.duplicateWindow != self.duplicateWindow {
                out.append("duplicate window \(found.duplicateWindow.short) (fleet.duplicate_window = \"\(self.duplicateWindow.short)\")")
            }
            if !found.fileStorage { out.append("memory storage (a restarted NATS loses the feed; wsbridged makes file streams)") }
            return out
        }
    }

    /// The lease bucket's settings (`fleet.standby` other than none).
    public struct Bucket: Sendable, Equatable {
        public var ttl: Duration
        public var replicas: Int

        public init(ttl: Duration, replicas: Int) {
            self.ttl = ttl
            self.replicas = replicas
        }

        public var description: String { "TTL \(self.ttl.short), \(self.replicas) replica\(self.replicas == 1 ? "" : "s"), history 1" }

        public func differences(_ found: Bucket) -> [String] {
            var out: [String] = []
            if found.ttl != self.ttl { out.append("TTL \(found.ttl.short) (fleet.lease_ttl = \"\(self.ttl.short)\")") }
            if found.replicas != self.replicas { out.append("\(found.replicas) replica(s) (fleet.replicas = \(self.replicas))") }
            return out
        }
    }

    public var stream: Stream
    /// Nil: no standby, no lease.
    public var bucket: Bucket?

    public init(_ fleet: Configuration.Fleet) {
        // A subject per key takes one token per key: the stream takes them all.
        let subject = FleetSubject(fleet.subject).map { $0.filled("*") } ?? fleet.subject
        self.stream = Stream(subjects: [subject], replicas: fleet.replicas, duplicateWindow: fleet.duplicateWindow, fileStorage: true)
        self.bucket = fleet.standby == .none ? nil : Bucket(ttl: fleet.leaseTTL, replicas: fleet.replicas)
    }

    /// Whether the NATS subject `pattern` (with `*` and `>`) takes every subject `subject` does.
    public static func covers(_ pattern: String, _ subject: String) -> Bool {
        let p = pattern.split(separator: ".", omittingEmptySubsequences: false)
        let s = subject.split(separator: ".", omittingEmptySubsequences: false)
        for (i, token) in p.enumerated() {
            if token == ">" { return s.count > i }
            guard i < s.count else { return false }
            if token == "*" { if s[i] == ">" { return false } else { continue } }
            if token != s[i] { return false }
        }
        return p.count == s.count
    }
}
