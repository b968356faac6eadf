import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing
import WSBridgeCore
import WSBridgeProtocol

@testable import WSBridgeDaemon

/// A renewal on the link's driver (an `EmbeddedEventLoop`, its clock moved by hand): the second
/// connection is a connection like the first (its pace, its pong, its close), the overlap
/// delivers each message once, and the old connection closes with 1000 "renewed".
@Suite struct UpstreamLinkRenewalTests {
    typealias Harness = UpstreamLinkDriverTests.Harness

    static func e(_ u: Int) -> String { #"{"stream":"a","data":{"u":\#(u)}}"# }

    /// Opens the link, then renews it: the second connection dialed and upgraded.
    static func renewed(_ h: Harness) -> (old: UpstreamLinkDriverTests.EmbeddedDialer.Dial, new: UpstreamLinkDriverTests.EmbeddedDialer.Dial) {
        let old = h.open()
        h.link.renew(why: "the test")
        h.loop.run()
        let new = h.dialer.last
        new.upgraded()
        h.loop.run()
        return (old, new)
    }

    @Test func theOverlapDeliversEachMessageOnceAndTheOldConnectionClosesRenewed() throws {
        let h = Harness {
            $0.upstream.dedupe = ["stream", "data.u"]
            $0.heartbeat.interval = .seconds(1000)
        }
        let (old, new) = Self.renewed(h)
        #expect(h.dialer.all.count == 2)
        try old.receive(text: Self.e(1))
        try old.receive(text: Self.e(2))
        // The new connection has 2 (the same: dropped) and is ahead with 3 (held): it has
        // caught up, and takes over; what it held goes first.
        try new.receive(text: Self.e(2))
        try new.receive(text: Self.e(3))
        h.loop.run()
        #expect(h.events.messages == [1, 2, 3].map(Self.e))
        #expect(h.link.renewalStatus?.renewals == 1)
        // The old connection's close frame: 1000, "renewed".
        let close = try #require(try old.written().first { $0.opcode == .connectionClose })
        var data = close.data
        #expect(data.readInteger(as: UInt16.self) == 1000 && data.readString(length: data.readableBytes) == "renewed")
        // What the old one still brings is the new one's: dropped; the new one's go on.
        try old.receive(text: Self.e(3))
        try new.receive(text: Self.e(4))
        h.loop.run()
        #expect(h.events.messages == [1, 2, 3, 4].map(Self.e))
        #expect(h.link.renewalStatus?.duplicatesDropped == 2)
    }

    @Test func theNewConnectionsPongWaitsForItsPaceWhenPingsCount() throws {
        let h = Harness {
            $0.upstream.limits.messagesPerSecond = 2
            $0.upstream.limits.countPings = true
            $0.heartbeat.interval = .seconds(1000)
        }
        for n in 1...3 {
            _ = h.link.session.register(.init(key: "k\(n)"), payload: .text("sub \(n)"), client: 1, pid: nil, uid: nil)
        }
        let first = h.open()
        _ = try UpstreamLinkLimitsTests.run(h, first, for: .seconds(2))
        let (_, new) = Self.renewed(h)
        // The sticky sends go on the new connection at its own pace: sub 1 now, then one every
        // 500 ms. The server pings it at once: the pong takes the next place, before sub 2.
        try new.receive(0x9, [7])
        let start = h.loop.now
        var written: [(String, Int64)] = []
        while h.loop.now.uptimeNanoseconds - start.uptimeNanoseconds < 1_600_000_000 {
            h.loop.run()
            let at = Int64((h.loop.now.uptimeNanoseconds - start.uptimeNanoseconds) / 1_000_000)
            for frame in try new.written() {
                written.append((frame.opcode == .pong ? "pong" : String(buffer: frame.data), at))
            }
            h.loop.advanceTime(by: .milliseconds(10))
        }
        #expect(written.map(\.0) == ["sub 1", "pong", "sub 2", "sub 3"], "\(written)")
        #expect(written.map(\.1) == [0, 500, 1000, 1500], "\(written)")
    }

    @Test func noPongGoesOnTheOldConnectionAfterItsCloseFrame() throws {
        let h = Harness {
            $0.upstream.dedupe = ["stream", "data.u"]
            $0.heartbeat.interval = .seconds(1000)
        }
        let (old, new) = Self.renewed(h)
        // Before the takeover the old connection answers pings as the current one.
        try old.receive(0x9, [1])
        h.loop.run()
        #expect(try old.written().map(\.opcode) == [.pong])
        try old.receive(text: Self.e(1))
        try new.receive(text: Self.e(1))
        h.loop.run()
        // It took over: the old connection's close frame went; a ping after it gets no pong
        // (RFC 6455 §5.5.1), while the new connection's pings are answered.
        #expect(try old.written().map(\.opcode) == [.connectionClose])
        try old.receive(0x9, [2])
        try new.receive(0x9, [3])
        h.loop.run()
        #expect(try old.written().isEmpty)
        #expect(try new.written().map(\.opcode) == [.pong])
    }

    /// The new connection has a heartbeat from its upgrade, as any connection: it pings, and a
    /// new connection that stays silent past the deadline fails the renewal (the old one stays
    /// the link's, open); one that answers takes over with that heartbeat running.
    @Test func aSilentNewConnectionFailsTheRenewalAtItsHeartbeatsDeadline() throws {
        let h = Harness {
            $0.upstream.dedupe = ["stream", "data.u"]
            $0.heartbeat.interval = .seconds(10)
            $0.heartbeat.deadline = .seconds(5)
        }
        let (old, new) = Self.renewed(h)
        _ = try old.written()
        _ = try new.written()
        h.loop.advanceTime(by: .seconds(10))
        // Both ping; only the old one answers.
        #expect(try new.written().map(\.opcode) == [.ping])
        let ping = try #require(try old.written().first { $0.opcode == .ping })
        try old.receive(0xA, Array(ping.data.readableBytesView))
        h.loop.advanceTime(by: .seconds(5))
        #expect(h.link.renewalStatus?.failed == 1, "\(String(describing: h.link.renewalStatus))")
        #expect(h.link.renewalStatus?.last?.failure?.contains("the new connection is dead") == true)
        #expect(h.link.phase == .open && h.link.renewalStatus?.underway == nil)
        // The old connection is the link's still; the new one is gone (nothing of it is heard).
        try old.receive(0x9, [7])
        try new.receive(0x9, [8])
        h.loop.run()
        #expect(try old.written().map(\.opcode) == [.pong] && new.written().isEmpty)
    }

    /// The server's close frame on the new connection is echoed as on any connection, and its
    /// end fails the renewal; the old connection stays the link's.
    @Test func theServersCloseOnTheNewConnectionIsEchoedAndEndsTheRenewal() throws {
        let h = Harness {
            $0.upstream.dedupe = ["stream", "data.u"]
            $0.heartbeat.interval = .seconds(1000)
        }
        let (old, new) = Self.renewed(h)
        _ = try new.written()
        try new.receiveClose(1013, "try again later")
        h.loop.run()
        // Echoed with its code (RFC 6455 §5.5.1); the server then ends TCP: the renewal failed.
        let echo = try #require(try new.written().first { $0.opcode == .connectionClose })
        var data = echo.data
        #expect(data.readInteger(as: UInt16.self) == 1013)
        try new.channel.close().wait()
        h.loop.run()
        #expect(h.link.renewalStatus?.failed == 1 && h.link.phase == .open)
        try old.receive(0x9, [7])
        h.loop.run()
        #expect(try old.written().map(\.opcode) == [.pong])
    }
}
