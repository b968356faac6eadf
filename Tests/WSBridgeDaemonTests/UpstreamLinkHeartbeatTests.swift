import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing
import WSBridgeCore
import WSBridgeProtocol

@testable import WSBridgeDaemon

/// The heartbeat of the link's connection on an `EmbeddedEventLoop`: the connection machine's
/// heartbeat (in the connection's context) and the link's one timer, with the loop's clock
/// advanced by hand (nothing sleeps).
@Suite struct UpstreamLinkHeartbeatTests {
    typealias Harness = UpstreamLinkDriverTests.Harness

    func harness(interval: Duration = .seconds(20), deadline: Duration = .seconds(10)) -> Harness {
        Harness {
            $0.heartbeat.interval = interval
            $0.heartbeat.deadline = deadline
        }
    }

    /// The payloads of the pings written since the last call.
    func pings(_ dial: UpstreamLinkDriverTests.EmbeddedDialer.Dial) throws -> [UInt64] {
        try dial.written().filter { $0.opcode == .ping }.map { frame in
            // Written as the link built it: masked later, by the encoder.
            var data = frame.data
            return data.readInteger(as: UInt64.self) ?? 0
        }
    }

    /// The server's pong with `payload`.
    func pong(_ dial: UpstreamLinkDriverTests.EmbeddedDialer.Dial, _ payload: UInt64) throws {
        try dial.receive(0xA, (0..<8).reversed().map { UInt8(truncatingIfNeeded: payload >> (8 * UInt64($0))) })
    }

    @Test func pingsEveryIntervalAndMeasuresTheRoundTrip() throws {
        let h = self.harness()
        let dial = h.open()
        h.loop.advanceTime(by: .seconds(19))
        #expect(try self.pings(dial).isEmpty)
        h.loop.advanceTime(by: .seconds(1))
        let first = try self.pings(dial)
        #expect(first.count == 1)
        h.loop.advanceTime(by: .milliseconds(30))
        try self.pong(dial, first[0])
        #expect(h.link.status.rttMs == 30)
        h.loop.advanceTime(by: .seconds(20))
        #expect(try self.pings(dial).count == 1)
        #expect(h.link.phase == .open)
    }

    @Test func anythingReceivedCountsAsLiveness() throws {
        let h = self.harness(interval: .seconds(2), deadline: .seconds(1))
        let dial = h.open()
        // A message every half second, never a pong: the link lives, pinged every 2 s.
        var pinged = 0
        for _ in 0..<20 {
            h.loop.advanceTime(by: .milliseconds(500))
            try dial.receive(text: "{}")
            pinged += try self.pings(dial).count
        }
        #expect(pinged == 5 && h.link.phase == .open)
        // Then silence: dead a deadline after the next ping.
        h.loop.advanceTime(by: .seconds(3))
        #expect(h.link.phase == .backingOff)
        #expect(h.link.status.lastClose?.reason.hasPrefix("heartbeat deadline passed") == true)
    }

    @Test func aLivenessCheckPingsAtOnceAndStartsTheDeadline() throws {
        let h = self.harness()
        let dial = h.open()
        h.loop.advanceTime(by: .seconds(5))
        h.link.checkLiveness(why: "test")
        #expect(try self.pings(dial).count == 1)
        h.loop.advanceTime(by: .seconds(10))
        #expect(h.link.phase == .backingOff)
    }

    @Test func aReloadTakesTheNewIntervalFromNow() throws {
        var configuration = Configuration()
        configuration.upstream.url = UpstreamURL(scheme: .ws, host: "127.0.0.1", port: 9, path: "/")
        let h = Harness(configuration)
        let dial = h.open()
        h.loop.advanceTime(by: .seconds(5))
        configuration.heartbeat.interval = .seconds(1)
        h.link.update(configuration: configuration)
        h.loop.advanceTime(by: .seconds(1))
        #expect(try self.pings(dial).count == 1)
    }

    @Test func theHeartbeatEndsWithItsConnection() throws {
        let h = self.harness(interval: .seconds(2), deadline: .seconds(1))
        let dial = h.open()
        h.loop.advanceTime(by: .seconds(2))
        #expect(try self.pings(dial).count == 1)
        // The server closes before the deadline: the link ends by its close, not the heartbeat's.
        try dial.receiveClose(1012, "restart")
        try dial.channel.close().wait()
        h.loop.run()
        #expect(h.link.phase == .backingOff && h.link.status.rttMs == nil)
        h.loop.advanceTime(by: .milliseconds(500))
        #expect(h.link.status.lastClose?.code == 1012)
    }

    @Test func noPingFollowsOurCloseFrame() throws {
        let h = self.harness(interval: .seconds(2), deadline: .seconds(10))
        let dial = h.open()
        h.link.close(code: 1000, reason: "operator")
        h.loop.run()
        #expect(try dial.written().map(\.opcode) == [.connectionClose])
        // The server is slow to answer: the heartbeat's time passes, and no ping goes after the close.
        h.loop.advanceTime(by: .seconds(2))
        #expect(try self.pings(dial).isEmpty)
    }
}
