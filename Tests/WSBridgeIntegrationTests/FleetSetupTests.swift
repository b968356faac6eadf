import Foundation
import Testing
import WSBridgeProtocol

/// `wsbridged --fleet-init` (docs/fleet.md, step 2) against a 3-node cluster with nothing in it,
/// and a bridge whose stream's last id stops meaning what it expects (another publisher's message,
/// a purge): it goes on with nothing lost after it and no loop.
@Suite(.serialized) struct FleetSetupTests {
    static func config(_ dir: TemporaryDirectory, _ name: String, ports: [Int], fleet: String) throws -> String {
        let servers = ports.map { "\"nats://127.0.0.1:\($0)\"" }.joined(separator: ", ")
        return try writeDaemonConfig(
            dir, name, url: "ws://127.0.0.1:9/unused", socket: dir.file("\(name).sock"), extra: "[fleet]\nservers = [\(servers)]\n" + fleet)
    }

    static func info(_ node: NATSServer, _ stream: String) throws -> JSONValue {
        try #require(FleetTests.js(node, ["info", stream]).first, "no info of \(stream)")
    }

    @Test func fleetInitMakesTheStreamAndTheBucketOnceAndChangesNothingUnasked() async throws {
        let cluster = try FleetTests.Cluster()
        let nodes = try await cluster.startEmpty()
        defer { for node in nodes { node.process.stop() } }
        let dir = try TemporaryDirectory()
        let config = try Self.config(
            dir, "init", ports: cluster.clients,
            fleet: """
                stream = "TICKS"
                subject = "ticks.${msg:sym}"
                standby = "cold"
                lease_ttl = "3s"
                replicas = 3
                duplicate_window = "5m"
                """)
        let first = try spawnDaemonAndWait(["--config", config, "--fleet-init"])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(first.stdout.contains("stream TICKS: made (subjects ticks.*, file storage, 3 replicas, duplicate window 300s"), "\(first.stdout)")
        #expect(first.stdout.contains("lease bucket wsbridge-leases: made (TTL 3s, 3 replicas, history 1)"), "\(first.stdout)")
        let stream = try Self.info(nodes[0], "TICKS")
        #expect(stream.value(at: "config.num_replicas")?.intValue == 3)
        #expect(stream.value(at: "config.duplicate_window")?.intValue == 300_000_000_000)
        #expect(stream.value(at: "config.subjects") == .array([.string("ticks.*")]))
        #expect(stream.value(at: "config.storage")?.stringValue == "file")
        let bucket = try Self.info(nodes[1], "KV_wsbridge-leases")
        #expect(bucket.value(at: "config.max_age")?.intValue == 3_000_000_000)
        #expect(bucket.value(at: "config.num_replicas")?.intValue == 3)

        // Again: nothing made, nothing changed.
        let again = try spawnDaemonAndWait(["--config", config, "--fleet-init"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stdout.contains("stream TICKS: already there, as [fleet] says"), "\(again.stdout)")
        #expect(again.stdout.contains("lease bucket wsbridge-leases: already there, as [fleet] says"), "\(again.stdout)")
        #expect(try Self.info(nodes[0], "TICKS")["created"] == stream["created"])

        // A stream of other settings: what differs is said, nothing is changed.
        #expect(try FleetTests.js(nodes[1], ["create-stream", "OTHER", "other.>", "--replicas", "1"]).first?["name"] == "OTHER")
        let other = try Self.config(dir, "other", ports: cluster.clients, fleet: "stream = \"OTHER\"\nsubject = \"feed.x\"\nreplicas = 3\n")
        let differs = try spawnDaemonAndWait(["--config", other, "--fleet-init"])
        #expect(differs.status == 1, "\(differs.stdout) \(differs.stderr)")
        #expect(differs.stdout.contains("stream OTHER: already there, and differs from [fleet]"), "\(differs.stdout)")
        #expect(differs.stdout.contains("do not take feed.x (fleet.subject)"), "\(differs.stdout)")
        #expect(differs.stdout.contains("1 replica(s) (fleet.replicas = 3)"), "\(differs.stdout)")
        #expect(differs.stdout.contains("lease bucket wsbridge-leases: not needed"), "\(differs.stdout)")
        let unchanged = try Self.info(nodes[1], "OTHER")
        #expect(unchanged.value(at: "config.num_replicas")?.intValue == 1)
        #expect(unchanged.value(at: "config.subjects") == .array([.string("other.>")]))

        // No server answers: a clear error, not a hang.
        let nobody = try Self.config(dir, "nobody", ports: [try freePort()], fleet: "stream = \"X\"\nsubject = \"x\"\n")
        let failed = try spawnDaemonAndWait(["--config", nobody, "--fleet-init"])
        #expect(failed.status == 69 && failed.stderr.contains("wsbridged --fleet-init: connecting to nats://127.0.0.1:"), "\(failed.stderr)")
    }

    /// Another publisher's message in the stream between the bridge's, then the stream purged: the
    /// bridge's next publishes no longer find their predecessor last. It reads where the stream
    /// stands and goes on: every message after stored once, in order, all acknowledged.
    @Test func aStreamWhoseLastIdChangedUnderTheBridgeDoesNotWedgeIt() async throws {
        let (dir, nats, upstream, daemon, socket) = try await FleetTests.publishing()
        defer {
            daemon.stop()
            nats.process.stop()
            withExtendedLifetime(dir) {}
        }
        upstream.command("ticker 200 64 3000")
        try await awaitStatus(socket, "500 acknowledged") { ($0.fleet?.acknowledgedThrough ?? 0) >= 500 }
        let foreign = try FleetTests.jsAnswer(nats, ["publish", "FEED", "feed.other", "not the bridge's"])
        #expect(foreign.lines.first?["seq"] != nil, "\(foreign.error)")
        try await awaitStatus(socket, "1,000 acknowledged") { ($0.fleet?.acknowledgedThrough ?? 0) >= 1000 }
        let purged = try FleetTests.jsAnswer(nats, ["purge", "FEED"])
        #expect(purged.lines.first?["success"] == .bool(true), "\(purged.error)")
        let purgedAt = try daemonStatus(socket).fleet?.acknowledgedThrough ?? 0
        _ = try FleetTests.jsAnswer(nats, ["publish", "FEED", "feed.other", "again not the bridge's"])
        try await awaitStatus(socket, "every message acknowledged", timeout: .seconds(60)) { s in
            s.seq >= 3000 && s.fleet?.acknowledgedThrough == s.seq
        }
        let status = try daemonStatus(socket)
        #expect(status.fleet?.lost == 0 && status.fleet?.lastError == nil, "\(String(describing: status.fleet))")
        // After the purge: the bridge's messages from where it stood on, once each, in order.
        let seqs = try FleetTests.stored(nats).map(\.seq).filter { $0 > 0 }
        let first = try #require(seqs.first, "nothing stored after the purge")
        #expect(
            first <= purgedAt + 200,
            "stored after the purge from seq \(first); acknowledged through \(purgedAt) at the purge (a second of the feed may have been stored, then purged, before its answer came)"
        )
        #expect(seqs == Array(first...3000), "\(FleetTests.summary(seqs.map { $0 - first + 1 }, 3000 - first + 1)); \(daemon.stderr.text.suffix(2000))")
    }
}
