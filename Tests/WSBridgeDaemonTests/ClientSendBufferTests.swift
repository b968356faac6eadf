import NIOCore
import Testing
import WSBridgeCore

@testable import WSBridgeDaemon

/// A client's send buffer: small from its accept, large once it read half the large one within
/// a window (what NIO and the kernel may still hold not counted as read), small again when it
/// lags without reading fast; a reload without a small buffer makes it large.
@Suite struct ClientSendBufferTests {
    static func limits(large: Int = 1 << 20, small: Int = 64 << 10) -> Configuration.Local {
        var limits = Configuration.Local()
        limits.sendBufferBytes = large
        limits.laggingSendBufferBytes = small
        return limits
    }

    static let start = NIODeadline.uptimeNanoseconds(1_000_000_000)
    static func at(_ ms: Int64) -> NIODeadline { Self.start + .milliseconds(ms) }

    @Test func aReaderThatReadsHalfTheLargeBufferWithinTheWindowGetsIt() {
        var buffer = ClientSendBuffer(Self.limits(), now: Self.start)
        #expect(buffer.current == 64 << 10)
        // 3 × 64 KiB may sit in the kernel: 512 KiB more is read within half a second.
        #expect(buffer.wrote(500 << 10, now: Self.at(300)) { 0 } == nil)
        #expect(buffer.wrote(203 << 10, now: Self.at(450)) { 0 } == nil)
        #expect(buffer.wrote(1 << 10, now: Self.at(450)) { 0 } == 1 << 20)
        #expect(buffer.current == 1 << 20)
        // The same over more than half a second is not fast.
        var slow = ClientSendBuffer(Self.limits(), now: Self.start)
        #expect(slow.wrote(500 << 10, now: Self.at(300)) { 0 } == nil)
        #expect(slow.wrote(204 << 10, now: Self.at(501)) { 0 } == nil)
        // It reads fast now: lagging keeps the large one.
        #expect(buffer.lagged(now: Self.at(600)) == nil)
    }

    @Test func aReaderThatPullsABufferEveryTenthOfASecondNeverGetsIt() {
        // Like an asyncio reader behind a feed: it takes what the kernel holds at once (here
        // 160 KiB), then parses it for 140 ms; every window starts after a gap of 500 ms.
        var buffer = ClientSendBuffer(Self.limits(), now: Self.start)
        var t: Int64 = 0
        for _ in 0..<100 {
            t += 140
            #expect(buffer.wrote(160 << 10, now: Self.at(t)) { 0 } == nil)
        }
        #expect(buffer.current == 64 << 10)
    }

    @Test func aClientThatLagsGetsTheSmallBufferBackUnlessItReadsFastNow() {
        var buffer = ClientSendBuffer(Self.limits(), now: Self.start)
        #expect(buffer.wrote(1 << 20, now: Self.at(10)) { 0 } == 1 << 20)
        #expect(buffer.lagged(now: Self.at(400)) == nil, "within the window it read fast in")
        #expect(buffer.lagged(now: Self.at(600)) == 64 << 10)
    }

    @Test func aReaderThatReadsNothingNeverGetsIt() {
        var buffer = ClientSendBuffer(Self.limits())
        // Everything written still waits in NIO's buffer.
        var written = 0
        for _ in 0..<100 {
            written += 64 << 10
            let waiting = written - 3 * (64 << 10)
            #expect(buffer.wrote(64 << 10) { max(0, waiting) } == nil)
        }
        #expect(buffer.current == 64 << 10)
    }

    @Test func noSmallBufferMeansTheLargeOneAlways() {
        var none = ClientSendBuffer(Self.limits(small: 0))
        #expect(none.current == 1 << 20)
        #expect(none.wrote(4 << 20) { 0 } == nil && none.lagged() == nil)
        var reloaded = ClientSendBuffer(Self.limits())
        #expect(reloaded.update(small: 0) == 1 << 20)
        #expect(reloaded.update(small: 0) == nil, "set once")
        #expect(ClientSendBuffer.initial(Self.limits(large: 0)) == 0, "the system's default")
    }
}
