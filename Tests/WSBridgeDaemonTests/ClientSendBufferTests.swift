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

    @Test func aReaderThatReadsHalfTheLargeBufferAtOnceGetsIt() {
        var buffer = ClientSendBuffer(Self.limits())
        #expect(buffer.current == 64 << 10)
        // 3 × 64 KiB may sit in the kernel: 512 KiB more is read.
        #expect(buffer.wrote(500 << 10) { 0 } == nil)
        #expect(buffer.wrote(212 << 10) { 0 } == 1 << 20)
        #expect(buffer.current == 1 << 20)
        // It reads fast now: lagging keeps the large one.
        #expect(buffer.lagged() == nil)
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
