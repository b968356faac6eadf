import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing
import WSBridgeCore
import WSBridgeProtocol

@testable import WSBridgeDaemon

/// `[upstream.limits]` on the link's driver (an `EmbeddedEventLoop`, its clock moved by hand):
/// the pace of what the link writes, and the window of connection attempts.
@Suite struct UpstreamLinkLimitsTests {
    typealias Harness = UpstreamLinkDriverTests.Harness

    /// A data frame the link wrote, and when (the loop's clock, in ms from `start`).
    struct Written: Equatable {
        var text: String
        var atMillis: Int64
    }

    /// Moves the clock by `step` until `total` passed, collecting the data frames written (and the
    /// pings, as "ping"), each with the instant it was written.
    static func run(_ h: Harness, _ dial: UpstreamLinkDriverTests.EmbeddedDialer.Dial, for total: TimeAmount, step: TimeAmount = .milliseconds(10))
        throws -> [Written]
    {
        let start = h.loop.now
        var written: [Written] = []
        func collect() throws {
            h.loop.run()
            let at = (h.loop.now.uptimeNanoseconds - start.uptimeNanoseconds) / 1_000_000
            for frame in try dial.written() {
                switch frame.opcode {
                case .text: written.append(.init(text: String(buffer: frame.data), atMillis: Int64(at)))
                case .ping: written.append(.init(text: "ping", atMillis: Int64(at)))
                default: break
                }
            }
        }
        try collect()
        while h.loop.now.uptimeNanoseconds - start.uptimeNanoseconds < UInt64(total.nanoseconds) {
            h.loop.advanceTime(by: step)
            try collect()
        }
        return written
    }

    /// The most messages written in any window of `window` ms.
    static func most(_ written: [Written], in window: Int64) -> Int {
        written.indices.map { i in written[i...].prefix { $0.atMillis - written[i].atMillis < window }.count }.max() ?? 0
    }

    @Test func overTheRateEverythingWaitsInOrderTheSessionFirstAndNothingIsLost() throws {
        let h = Harness {
            $0.upstream.limits.messagesPerSecond = 5
            $0.upstream.onOpen = [try! OpeningMessage(parsing: "login")]
            $0.heartbeat.interval = .seconds(1000)
        }
        for n in 1...6 {
            _ = h.link.session.register(.init(key: "k\(n)"), payload: .text("sub \(n)"), client: 1, pid: nil, uid: nil)
        }
        // Sends made before the open wait in the queue; more come while the restore waits.
        let early = (1...3).map { h.link.send(OutboundMessage(.text("early \($0)"))) }
        #expect(early.allSatisfy { if case .queued = $0 { true } else { false } })
        let dial = h.open()
        let late = (1...3).map { h.link.send(OutboundMessage(.text("late \($0)"))) }
        #expect(late.allSatisfy { if case .queued = $0 { true } else { false } }, "over the rate, a send waits: \(late)")
        // The pace shows in status while it holds messages back.
        let waiting = h.link.status.limits
        #expect(waiting?.messagesPerSecond == 5 && waiting?.waiting == 6 && waiting?.waitMs == 0, "\(String(describing: waiting))")
        let written = try Self.run(h, dial, for: .seconds(4))
        let texts = written.map(\.text)
        #expect(texts == ["login"] + (1...6).map { "sub \($0)" } + (1...3).map { "early \($0)" } + (1...3).map { "late \($0)" })
        // One every 200 ms: never more than 5 in any second.
        #expect(Self.most(written, in: 1000) == 5)
        #expect(written.map(\.atMillis).last == 2400)
        let after = h.link.status.limits
        #expect(after?.waitMs == nil && after?.waiting == 0 && after?.paced == 12, "\(String(describing: after))")
        // Later, with room in the bucket, a send goes at once.
        #expect(h.link.send(OutboundMessage(.text("now"))) == .sent)
    }

    @Test func aBurstGoesAtOnceThenTheRate() throws {
        let h = Harness {
            $0.upstream.limits.messagesPerSecond = 10
            $0.upstream.limits.burst = 4
        }
        let dial = h.open()
        let outcomes = (1...6).map { h.link.send(OutboundMessage(.text("m\($0)"))) }
        #expect(outcomes.prefix(4).allSatisfy { $0 == .sent } && outcomes.suffix(2).allSatisfy { $0 != .sent })
        let written = try Self.run(h, dial, for: .seconds(1))
        #expect(written.map(\.atMillis) == [0, 0, 0, 0, 100, 200])
    }

    @Test(arguments: [false, true])
    func aPingCountsOnlyWhenTheFeedSaysSoAndThenGoesFirst(_ countPings: Bool) throws {
        let h = Harness {
            $0.upstream.limits.messagesPerSecond = 2
            $0.upstream.limits.countPings = countPings
            $0.heartbeat.interval = .milliseconds(1100)
            $0.heartbeat.deadline = .seconds(10)
        }
        for n in 1...4 {
            _ = h.link.session.register(.init(key: "k\(n)"), payload: .text("sub \(n)"), client: 1, pid: nil, uid: nil)
        }
        let dial = h.open()
        let written = try Self.run(h, dial, for: .milliseconds(2000))
        let ping = try #require(written.first { $0.text == "ping" })
        if countPings {
            // Due at 1.1 s, behind sub 4: it goes in the next place (1.5 s), before sub 4.
            #expect(written.map(\.text) == ["sub 1", "sub 2", "sub 3", "ping", "sub 4"])
            #expect(ping.atMillis == 1500)
            #expect(Self.most(written, in: 1000) == 2)
        } else {
            #expect(written.map(\.text) == ["sub 1", "sub 2", "sub 3", "ping", "sub 4"])
            #expect(ping.atMillis == 1100)
            #expect(written.filter { $0.text != "ping" }.map(\.atMillis) == [0, 500, 1000, 1500])
        }
    }

    @Test func aRateBelowTheHeartbeatsKeepsOnePingWaitingNotOnePerInterval() throws {
        let h = Harness {
            $0.upstream.limits.messagesPerSecond = 0.1
            $0.upstream.limits.countPings = true
            $0.heartbeat.interval = .seconds(1)
            $0.heartbeat.deadline = .seconds(100)
        }
        _ = h.link.session.register(.init(key: "k"), payload: .text("sub"), client: 1, pid: nil, uid: nil)
        let dial = h.open()
        // "sub" at once; then a ping due every second, one place every 10 s.
        let written = try Self.run(h, dial, for: .milliseconds(9500), step: .milliseconds(500))
        #expect(written.map(\.text) == ["sub"])
        #expect(h.link.status.limits?.waiting == 1, "\(String(describing: h.link.status.limits))")
        let later = try Self.run(h, dial, for: .seconds(1), step: .milliseconds(500))
        #expect(later.map(\.text) == ["ping"])
    }

    @Test func whatWaitedOnALostConnectionIsNotWrittenOnTheNextButTheSessionIsRestoredAgain() throws {
        let h = Harness {
            $0.upstream.limits.messagesPerSecond = 5
            $0.backoff.policy = BackoffPolicy(base: .milliseconds(100), cap: .milliseconds(100), stableAfter: .seconds(30))
        }
        for n in 1...5 {
            _ = h.link.session.register(.init(key: "k\(n)"), payload: .text("sub \(n)"), client: 1, pid: nil, uid: nil)
        }
        let first = h.open()
        #expect(try Self.run(h, first, for: .milliseconds(300)).map(\.text) == ["sub 1", "sub 2"])
        try first.channel.close().wait()
        h.loop.advanceTime(by: .milliseconds(200))
        #expect(h.dialer.all.count == 2 && !first.channel.isActive)
        let second = h.dialer.last
        second.upgraded()
        let written = try Self.run(h, second, for: .seconds(2))
        #expect(written.map(\.text) == (1...5).map { "sub \($0)" })
        // A new connection starts with a full bucket (burst 1): the first at once.
        #expect(written.map(\.atMillis) == [0, 200, 400, 600, 800])
    }

    @Test func noMoreAttemptsThanTheWindowAllowsWhateverTheBackoff() throws {
        let h = Harness {
            $0.upstream.limits.connectAttempts = .init(limit: 3, window: .seconds(10))
            $0.backoff.policy = BackoffPolicy(base: .milliseconds(100), cap: .milliseconds(100), stableAfter: .seconds(30))
        }
        h.link.connect()
        h.loop.run()
        var refused = 0
        let start = h.loop.now.uptimeNanoseconds
        var waitSeen: Int64?
        // Every attempt fails (the server refuses it): the backoff alone would try 10 a second.
        while h.loop.now.uptimeNanoseconds - start < 35_000_000_000 {
            while refused < h.dialer.all.count {
                try h.dialer.all[refused].channel.close().wait()
                refused += 1
                h.loop.run()
            }
            if let wait = h.link.status.limits?.connectWaitMs { waitSeen = max(waitSeen ?? 0, wait) }
            h.loop.advanceTime(by: .milliseconds(50))
        }
        let dialedAt = h.dialer.all.map { Int64(($0.at.uptimeNanoseconds - start) / 1_000_000) }
        // 3 at once, then 3 more each time the oldest leaves the window.
        #expect(dialedAt.count == 12, "\(dialedAt)")
        for i in 3..<dialedAt.count {
            #expect(dialedAt[i] - dialedAt[i - 3] >= 10_000, "attempts \(i - 3) and \(i): \(dialedAt)")
        }
        // status says how long the next attempt waits, and how many are in the window.
        #expect((waitSeen ?? 0) > 9_000)
        #expect(h.link.status.limits?.connectAttempts == "3/10s" && h.link.status.limits?.attemptsInWindow == 3)
        #expect(h.link.phase == .connecting)
    }
}
