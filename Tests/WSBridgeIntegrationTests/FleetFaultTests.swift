import Foundation
import Testing
import WSBridgeProtocol

/// NATS faults under a fleet with a standby, cold (one message of the stream each, and batches) and
/// hot (docs/fleet.md, "The lease fails safe"):
/// the 3-node cluster, bridges a (leading) and b, two followers with an app each, a subscriber on
/// a's own socket, the test upstream at 1,000 messages a second. NATS down, a node lost (the one
/// the leader publishes through, or the one leading the lease's bucket, in the middle of its
/// renewals): the leader never stands down, its own subscriber misses nothing, the followers' apps
/// get every message once, in order, with no gap.
@Suite(.serialized) struct FleetFaultTests {
    /// Watches `socket`'s lease in `status` until stopped: every state it was seen in.
    final class LeaseWatch: @unchecked Sendable {
        private let lock = NSLock()
        private var seen: [String] = []
        private var task: Task<Void, Never>?

        init(_ socket: String) {
            self.task = Task { [weak self] in
                while !Task.isCancelled {
                    let state = FleetStandbyTests.lease(socket)
                    self?.lock.withLock { if self?.seen.last != state { self?.seen.append(state) } }
                    try? await Task.sleep(for: .milliseconds(100))
                }
            }
        }

        /// Stops watching: the states seen, in order, each once where it repeated.
        func stop() -> [String] {
            self.task?.cancel()
            return self.lock.withLock { self.seen }
        }
    }

    struct Setup {
        let f: FleetStandbyTests.Fleet
        var nodes: [NATSServer]
        let local: SocketClient

        func stop() {
            for follower in self.f.followers { follower.stop() }
            self.f.a.0.stop()
            self.f.b.0.stop()
            for node in self.nodes { node.process.stop() }
        }
    }

    /// The fleet with `bridges` bridges (1: b killed first, a alone), a subscriber on a.
    static func setUp(_ standby: String, bridges: Int) async throws -> Setup {
        let f = try await FleetStandbyTests.fleet(standby: standby, local: "subscriber_queue = 50000")
        if bridges == 1 {
            f.b.0.signal(SIGKILL)
            _ = await f.b.0.waitForExit()
        }
        let local = try await SocketClient.connected(to: f.a.1, name: "a-local", daemon: f.a.0)
        return Setup(f: f, nodes: f.nodes, local: local)
    }

    /// Each of the followers' apps and a's subscriber has ticks 1...total once each, in order, and
    /// no gap line.
    static func expectEverything(_ s: Setup, _ total: Int, _ what: String) async {
        for app in s.f.apps + [s.local] {
            let last = await app.lines.wait(timeout: .seconds(180)) { $0.contains(#"{\"tick\":\#(total),"#) }
            #expect(last != nil, "\(what): \(app.lines.name) never got tick \(total); a: \(s.f.a.0.stderr.text.suffix(1500))")
            let ticks = FleetFollowerTests.ticks(app).map(\.tick)
            #expect(ticks == Array(1...total), "\(what): \(app.lines.name): \(FleetTests.summary(ticks, total))")
            let gaps = app.lines.lines.filter { $0.contains(#""type":"gap""#) }
            #expect(gaps.isEmpty, "\(what): \(app.lines.name) was told of a gap: \(gaps)")
        }
    }

    /// The index of the node whose client port `url` names.
    static func node(_ url: String?, _ s: Setup) -> Int? {
        s.f.cluster.clients.firstIndex { url?.hasSuffix(":\($0)") == true }
    }

    /// The node leading the stream of the lease's bucket (`KV_wsbridge-leases`).
    static func leaseNode(_ s: Setup) throws -> Int? {
        for node in s.nodes {
            guard let info = try? FleetTests.js(node, ["info", "KV_wsbridge-leases"]).first,
                let leader = info.value(at: "cluster.leader")?.stringValue
            else { continue }
            return Int(leader.dropFirst())
        }
        return nil
    }

    /// All three nodes killed (-9) for 30 s while the feed flows, then started again with their
    /// stores. Cold: the leader held what NATS missed and still leads when NATS is back, so the
    /// followers get all of it; hot: both bridges held it, JetStream keeps each message once.
    @Test(arguments: ["cold", "cold+batch", "hot"])
    func allOfNATSDownFor30sLosesNothing(standby: String) async throws {
        var s = try await Self.setUp(standby, bridges: 2)
        defer { s.stop() }
        let total = 45_000
        s.f.upstream.command("ticker 1000 64 \(total)")
        for app in s.f.apps { #expect(await JournalTests.waitForSeq(app, 2000)) }
        let watch = LeaseWatch(s.f.a.1)
        for node in s.nodes { node.process.signal(SIGKILL) }
        for node in s.nodes { _ = await node.process.waitForExit() }
        // The outage is the scenario: 30 s of it, by the clock.
        try await Task.sleep(for: .seconds(30))
        for i in 0..<3 { s.nodes[i] = try await s.f.cluster.start(i) }
        let back = ContinuousClock.now
        await Self.expectEverything(s, total, "\(standby), NATS down 30 s")
        print("fleet (\(standby)): all of NATS down 30 s; the followers' apps had the whole feed \(ContinuousClock.now - back) after NATS was started again")
        let seen = watch.stop()
        #expect(seen.allSatisfy { $0.hasPrefix("leading") || $0 == "?" }, "a's lease: \(seen)")
        #expect(FleetStandbyTests.lease(s.f.b.1).hasPrefix("standing by for "))
        #expect(try daemonStatus(s.f.a.1).fleet?.lost == 0)
    }

    enum NodeFault: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// The node the leader publishes through, one bridge (b killed before) and two.
        case leadersNodeAlone, leadersNode
        /// The node leading the lease bucket's stream, killed in the middle of the renewals
        /// (three a lease): the next renewal meets its election.
        case leaseNode

        var bridges: Int { self == .leadersNodeAlone ? 1 : 2 }
        var testDescription: String { self.rawValue }
    }

    /// One node killed (-9) for 6 s while the feed flows, and started again with its store (the
    /// cluster keeps its quorum).
    @Test(arguments: ["cold", "cold+batch", "hot"], NodeFault.allCases)
    func aNATSNodeLostNeverStandsTheLeaderDown(standby: String, fault: NodeFault) async throws {
        var s = try await Self.setUp(standby, bridges: fault.bridges)
        defer { s.stop() }
        let total = 12_000
        s.f.upstream.command("ticker 1000 64 \(total)")
        for app in s.f.apps { #expect(await JournalTests.waitForSeq(app, 2000)) }
        let target =
            switch fault {
            case .leadersNode, .leadersNodeAlone: Self.node(try daemonStatus(s.f.a.1).fleet?.server, s)
            case .leaseNode: try Self.leaseNode(s)
            }
        let index = try #require(target, "which node to kill")
        let watch = LeaseWatch(s.f.a.1)
        s.nodes[index].process.signal(SIGKILL)
        _ = await s.nodes[index].process.waitForExit()
        try await Task.sleep(for: .seconds(6))
        s.nodes[index] = try await s.f.cluster.start(index)
        await Self.expectEverything(s, total, "\(standby), \(fault) n\(index) killed")
        let seen = watch.stop()
        #expect(seen.allSatisfy { $0.hasPrefix("leading") || $0 == "?" }, "a's lease: \(seen)")
        #expect(try daemonStatus(s.f.a.1).fleet?.lost == 0)
    }
}
