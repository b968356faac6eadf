import Foundation
import WSBridgeCore

#if canImport(Glibc)
    import Glibc
#endif

/// The journal's cost (docs/journal.md), side by side in the suite's runs:
/// - flat out, 100 subscribers, 100 B: journal off, `fsync = "batch"`, `fsync = "always"`
///   (deliveries per second, and bytes on disk per message);
/// - 10k msg/s to 99 live readers: journal off, on, and on with one more consumer replaying a
///   journal of 1 GiB from its start meanwhile (the live readers' p99).
extension Suite {
    static var journalScenarios: [Scenario] {
        [
            Scenario(group: "journal", bridge: .wsbridged, subscribers: 100),
            Scenario(group: "journal", bridge: .wsbridged, subscribers: 100, journal: "batch"),
            Scenario(group: "journal", bridge: .wsbridged, subscribers: 100, journal: "always"),
            Scenario(group: "journal", bridge: .wsbridged, subscribers: 99, rate: 10_000, seconds: 3),
            Scenario(group: "journal", bridge: .wsbridged, subscribers: 99, rate: 10_000, seconds: 3, journal: "batch"),
            Scenario(group: "journal", bridge: .wsbridged, subscribers: 99, rate: 10_000, seconds: 3, journal: "batch", replay: true),
            Scenario(group: "journal", bridge: .wsbridged, subscribers: 99, rate: 10_000, seconds: 3, journal: "batch", replay: true, replayNiced: true),
        ]
    }
}

extension Environment {
    /// The 1 GiB journal the replaying scenarios share (written once, before the runs).
    var sharedJournal: String { "\(self.dir)/journal-1g" }
    static let prefillBytes = 1 << 30
    static let prefillSize = 65536

    /// `[journal]` for a scenario: a fresh directory per flat-out run (its size is measured), the
    /// prefilled one for the rate runs.
    func journalConfig(_ scenario: Suite.Scenario, run: Int) -> String {
        guard let fsync = scenario.journal else { return "" }
        let dir = scenario.rate > 0 ? self.sharedJournal : self.journalDir(scenario, run: run)
        return """
            [journal]
            dir = "\(dir)"
            fsync = "\(fsync)"
            max_bytes = \(4 << 30)
            buffer_bytes = \(1 << 30)
            """
    }

    func journalDir(_ scenario: Suite.Scenario, run: Int) -> String {
        "\(self.dir)/journal-r\(run)-\(scenario.journal ?? "off")"
    }

    /// The bytes of a flat-out run's journal (its directory is removed after).
    func journalBytes(_ scenario: Suite.Scenario, run: Int) -> Int {
        let dir = self.journalDir(scenario, run: run)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let files = (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []
        return files.filter { $0.hasSuffix(".wsj") }.reduce(0) { total, name in
            total + ((try? FileManager.default.attributesOfItem(atPath: "\(dir)/\(name)")[.size] as? Int) ?? 0)
        }
    }

    /// Writes 1 GiB of 64 KiB messages through a daemon into the shared journal, then stops
    /// it (a clean stop: every message is on disk).
    func prefillJournal() async throws {
        let messages = Self.prefillBytes / Self.prefillSize
        let socket = "\(self.dir)/prefill.sock"
        var scenario = Suite.Scenario(group: "journal", bridge: .wsbridged, subscribers: 0, rate: 1, journal: "batch")
        scenario.seconds = 0
        let config = try self.wsbridgedConfig(socket: socket, extra: self.journalConfig(scenario, run: 0))
        let daemon = try Child(self.daemon, ["--config", config])
        _ = try await self.generator.waitLine { $0.hasPrefix("connected ") }
        let began = ContinuousClock.now
        // 4000 msg/s (250 MB/s): no faster than a disk takes it.
        self.generator.send("flood \(messages) \(Self.prefillSize) 4000")
        _ = try await self.generator.waitLine(seconds: 600) { $0.hasPrefix("flood done") }
        await daemon.stopAndWait()
        _ = try await self.generator.waitLine(seconds: 60) { $0.hasPrefix("disconnected 0") }
        let files = (try? FileManager.default.contentsOfDirectory(atPath: self.sharedJournal)) ?? []
        let bytes = files.filter { $0.hasSuffix(".wsj") }.reduce(0) { total, name in
            total + ((try? FileManager.default.attributesOfItem(atPath: "\(self.sharedJournal)/\(name)")[.size] as? Int) ?? 0)
        }
        emitLine(
            "journal: prefilled \(Format.human(Double(bytes))) B (\(messages) messages of \(Self.prefillSize) B) in \(String(format: "%.1f", (ContinuousClock.now - began).seconds)) s"
        )
    }

    /// What a replaying consumer read (MB/s over its whole run), once it is done; it is stopped.
    func replayed(_ replayer: Child?, since: ContinuousClock.Instant) async throws -> Double {
        guard let replayer else { return 0 }
        let line = try await replayer.waitLine(seconds: 600) { $0.hasPrefix("{") }
        let seconds = (ContinuousClock.now - since).seconds
        await replayer.stopAndWait(kill: true)
        let json = try JSONSerialization.jsonObject(with: Data(line.utf8)) as! [String: Any]
        let messages = json["messages"] as! Int
        return Double(messages) * Double(Self.prefillSize) / max(seconds, 1e-6) / 1e6
    }
}

extension Report {
    func journalMedian(_ journal: String?, rate: Int, replay: Bool, niced: Bool = false, _ key: (Suite.Sample) -> Double) -> Double? {
        guard
            let i = self.scenarios.firstIndex(where: {
                $0.group == "journal" && $0.journal == journal && $0.rate == rate && $0.replay == replay && $0.replayNiced == niced
            })
        else { return nil }
        return Format.median(self.samples[i].map(key))
    }

    func printJournal() {
        guard let off = self.journalMedian(nil, rate: 0, replay: false, \.deliveriesPerSecond) else { return }
        for policy in ["batch", "always"] {
            guard let on = self.journalMedian(policy, rate: 0, replay: false, \.deliveriesPerSecond) else { continue }
            let bytes = self.journalMedian(policy, rate: 0, replay: false, \.journalBytesPerMessage) ?? 0
            Swift.print(
                String(
                    format:
                        "- journal fsync %@, flat out × 100: %.0f %% of the deliveries/s with it off (target ≥ 80 %%); %.1f bytes on disk per 100 B message",
                    policy, on / off * 100, bytes))
        }
        if let quiet = self.journalMedian("batch", rate: 10_000, replay: false, \.p99),
            let busy = self.journalMedian("batch", rate: 10_000, replay: true, \.p99)
        {
            let mb = self.journalMedian("batch", rate: 10_000, replay: true, \.replayMBPerSecond) ?? 0
            if let off = self.journalMedian(nil, rate: 10_000, replay: false, \.p99) {
                Swift.print("- 10k msg/s × 99 live: p99 \(Format.ms(quiet)) with the journal on (fsync batch), \(Format.ms(off)) with it off")
            }
            Swift.print(
                String(
                    format:
                        "- 10k msg/s × 99 live, one consumer replaying the 1 GiB journal: live p99 %@ vs %@ without (%.0f %%; target within 10 %%); the replay read %.0f MB/s",
                    Format.ms(busy), Format.ms(quiet), busy / max(quiet, 1e-9) * 100, mb))
            if let niced = self.journalMedian("batch", rate: 10_000, replay: true, niced: true, \.p99) {
                let nicedMB = self.journalMedian("batch", rate: 10_000, replay: true, niced: true, \.replayMBPerSecond) ?? 0
                Swift.print(
                    String(
                        format:
                            "- the same with the replaying reader process at nice 19 (the daemon's own share): live p99 %@ (%.0f %%); the replay read %.0f MB/s",
                        Format.ms(niced), niced / max(quiet, 1e-9) * 100, nicedMB))
            }
        }
    }
}
