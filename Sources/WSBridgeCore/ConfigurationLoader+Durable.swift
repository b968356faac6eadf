import TOMLKit
import WSBridgeProtocol

/// The readers of the sections that keep things on disk: [queue] (and its spool) and [journal],
/// and the fsync policy both take.
extension ConfigurationReader {
    /// [queue]: the outbound queue and its spool.
    func queue(_ s: inout Section, _ config: inout Configuration) throws(ConfigurationError) {
        s.read("max_messages") { v in
            config.queue.maxMessages = try self.int(v, "queue.max_messages", in: 0...10_000_000, "a message count from 0 (no queueing) to 10000000")
        }
        s.read("max_bytes") { v in
            config.queue.maxBytes = try self.int(v, "queue.max_bytes", in: 0...(1 << 34), "a byte count from 0")
        }
        s.read("spool", reload: .restart) { v in
            let s = try self.string(v, "queue.spool")
            guard s.isEmpty || s.hasPrefix("/") else {
                throw self.error(
                    "queue.spool", v, "must be an absolute directory path such as \"/var/lib/wsbridged/spool\", or \"\" to keep the queue in memory only")
            }
            config.queue.spool = s.isEmpty ? nil : s
        }
        s.read("fsync") { v in
            config.queue.fsync = try self.fsyncPolicy(
                v, "queue.fsync",
                "\"always\" (each queued send is fdatasync'd before it is answered) or \"batch\" (written at once, fdatasync'd within a second)")
        }

    }

    /// [journal]: the upstream messages on disk, for consumers to resume from.
    func journal(_ s: inout Section, _ config: inout Configuration) throws(ConfigurationError) {
        s.read("dir") { v in
            let s = try self.string(v, "journal.dir")
            guard s.isEmpty || s.hasPrefix("/") else {
                throw self.error("journal.dir", v, "must be an absolute directory path such as \"/var/lib/wsbridged/journal\", or \"\" for no journal")
            }
            config.journal.dir = s.isEmpty ? nil : s
        }
        s.read("max_bytes") { v in
            config.journal.maxBytes = try self.int(v, "journal.max_bytes", in: (1 << 20)...(1 << 50), "a byte count of at least 1048576 (1 MiB)")
        }
        s.read("max_age") { v in
            config.journal.maxAge = try self.duration(v, "journal.max_age")
        }
        s.read("segment_bytes") { v in
            config.journal.segmentBytes = try self.int(
                v, "journal.segment_bytes", in: (64 << 10)...(1 << 30), "a byte count from 65536 (64 KiB) to 1073741824 (1 GiB)")
        }
        s.read("fsync") { v in
            config.journal.fsync = try self.fsyncPolicy(
                v, "journal.fsync",
                "\"batch\" (fdatasync at most every journal.fsync_interval, after writes) or \"always\" (every batch written is fdatasync'd at once)")
        }
        s.read("fsync_interval") { v in
            config.journal.fsyncInterval = try self.duration(v, "journal.fsync_interval")
        }
        s.read("buffer_bytes") { v in
            config.journal.bufferBytes = try self.int(
                v, "journal.buffer_bytes", in: (1 << 20)...(1 << 34), "a byte count from 1048576 (1 MiB) to 17179869184 (16 GiB)")
        }
        if config.journal.segmentBytes > config.journal.maxBytes {
            throw self.error(
                "journal.segment_bytes", nil,
                "is larger than journal.max_bytes (\(config.journal.maxBytes)): retention removes whole segments, so a segment must be smaller than the journal"
            )
        }
    }

    /// `always` or `batch`; `accepted` says what each means for this key.
    func fsyncPolicy(_ v: any TOMLValueConvertible, _ key: String, _ accepted: String) throws(ConfigurationError) -> Configuration.FsyncPolicy {
        guard let policy = Configuration.FsyncPolicy(rawValue: try self.string(v, key).lowercased()) else {
            throw self.error(key, v, "must be \(accepted)")
        }
        return policy
    }
}
