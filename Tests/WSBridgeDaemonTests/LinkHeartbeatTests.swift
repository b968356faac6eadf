import NIOCore
import NIOEmbedded
import Testing

@testable import WSBridgeDaemon

/// The heartbeat's driver on an `EmbeddedEventLoop`: its timer, its pings and its verdict, with
/// the loop's clock advanced by hand (nothing sleeps).
@Suite struct LinkHeartbeatTests {
    /// What a heartbeat did: the pings it wrote and the silence it reported.
    final class Record {
        var pings: [UInt64] = []
        var dead: [Duration] = []
    }

    func started(_ loop: EmbeddedEventLoop, interval: Duration = .seconds(20), deadline: Duration = .seconds(10)) -> (LinkHeartbeat, Record) {
        let heartbeat = LinkHeartbeat(eventLoop: loop)
        let record = Record()
        heartbeat.start(interval: interval, deadline: deadline, ping: { record.pings.append($0) }, dead: { record.dead.append($0) })
        return (heartbeat, record)
    }

    @Test func pingsEveryIntervalAndMeasuresTheRoundTrip() {
        let loop = EmbeddedEventLoop()
        let (heartbeat, record) = self.started(loop)
        loop.advanceTime(by: .seconds(19))
        #expect(record.pings.isEmpty)
        loop.advanceTime(by: .seconds(1))
        #expect(record.pings.count == 1)
        loop.advanceTime(by: .milliseconds(30))
        #expect(heartbeat.receivedPong(payload: record.pings[0]) == .milliseconds(30))
        #expect(heartbeat.roundTripTime == .milliseconds(30))
        loop.advanceTime(by: .seconds(20))
        #expect(record.pings.count == 2)
        #expect(record.dead.isEmpty)
    }

    @Test func silenceAfterAPingPastTheDeadlineIsADeadLinkToldOnce() {
        let loop = EmbeddedEventLoop()
        let (heartbeat, record) = self.started(loop, interval: .seconds(2), deadline: .seconds(1))
        loop.advanceTime(by: .seconds(2))
        #expect(record.pings.count == 1)
        loop.advanceTime(by: .milliseconds(999))
        #expect(record.dead.isEmpty)
        loop.advanceTime(by: .milliseconds(1))
        #expect(record.dead == [.seconds(3)])
        #expect(!heartbeat.isRunning)
        loop.advanceTime(by: .seconds(60))
        #expect(record.dead.count == 1 && record.pings.count == 1)
    }

    @Test func anythingReceivedCountsAsLiveness() {
        let loop = EmbeddedEventLoop()
        let (heartbeat, record) = self.started(loop, interval: .seconds(2), deadline: .seconds(1))
        // A message every half second, never a pong: the link lives, pinged every 2 s.
        for _ in 0..<20 {
            loop.advanceTime(by: .milliseconds(500))
            heartbeat.received()
        }
        #expect(record.pings.count == 5)
        #expect(record.dead.isEmpty)
        // Then silence: dead a deadline after the next ping.
        loop.advanceTime(by: .seconds(3))
        #expect(record.dead == [.seconds(3)])
    }

    @Test func aLivenessCheckPingsAtOnce() {
        let loop = EmbeddedEventLoop()
        let (heartbeat, record) = self.started(loop)
        loop.advanceTime(by: .seconds(5))
        #expect(heartbeat.checkNow())
        #expect(record.pings.count == 1)
        loop.advanceTime(by: .seconds(10))
        #expect(record.dead.count == 1)
        // Not running any more: nothing to check.
        #expect(!heartbeat.checkNow())
    }

    @Test func aReloadTakesTheNewIntervalFromNow() {
        let loop = EmbeddedEventLoop()
        let (heartbeat, record) = self.started(loop)
        loop.advanceTime(by: .seconds(5))
        heartbeat.update(interval: .seconds(1), deadline: .seconds(10))
        loop.advanceTime(by: .seconds(1))
        #expect(record.pings.count == 1)
    }

    @Test func stoppedItNeitherPingsNorJudges() {
        let loop = EmbeddedEventLoop()
        let (heartbeat, record) = self.started(loop, interval: .seconds(2), deadline: .seconds(1))
        loop.advanceTime(by: .seconds(2))
        heartbeat.stop()
        loop.advanceTime(by: .seconds(60))
        #expect(record.pings.count == 1 && record.dead.isEmpty)
        #expect(heartbeat.roundTripTime == nil)
    }
}
