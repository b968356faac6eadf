import Histogram
import NIOConcurrencyHelpers
import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// A WebSocket client on a Unix socket for the benchmarks (`--websocket`): sends the upgrade
/// request, waits for the 101, then counts the server's frames without decoding their payloads
/// (a server's frames are never masked): each message's generator stamp (`{"t":…,"i":…}` at the
/// payload's start) gives its latency and its index, from which the gaps are counted.
final class FrameCounter: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let end: [UInt8]
    private let totals: NIOLockedValueBox<Totals>
    private let connections: Int
    private let finished: EventLoopPromise<Void>
    /// Succeeded by the server's 101.
    private let greeted: EventLoopPromise<Void>
    private var upgraded = false
    private var pending: [UInt8] = []
    private var local = Totals()
    private var latencies: [UInt64] = []
    private var lastIndex: UInt64?

    init(end: [UInt8], totals: NIOLockedValueBox<Totals>, connections: Int, finished: EventLoopPromise<Void>, greeted: EventLoopPromise<Void>) {
        self.end = end
        self.totals = totals
        self.connections = connections
        self.finished = finished
        self.greeted = greeted
    }

    func channelActive(context: ChannelHandlerContext) {
        let request =
            "GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        context.writeAndFlush(Self.wrapOutboundOut(ByteBuffer(string: request)), promise: nil)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.greeted.succeed(())
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = Self.unwrapInboundIn(data)
        let now = monotonicNanos()
        var ended = false
        buffer.withUnsafeReadableBytes { bytes in
            if self.pending.isEmpty {
                let used = self.consume(bytes, now: now, ended: &ended)
                self.pending.append(contentsOf: bytes[used...])
            } else {
                self.pending.append(contentsOf: bytes)
                let used = self.pending.withUnsafeBytes { self.consume($0, now: now, ended: &ended) }
                self.pending.removeFirst(used)
            }
        }
        if self.totals.add(&self.local, latencies: &self.latencies, ended: ended, at: now, connections: self.connections) {
            self.finished.succeed(())
        }
    }

    /// The whole frames (and the 101's head) at the start of `bytes`: how many bytes they took.
    private func consume(_ bytes: UnsafeRawBufferPointer, now: UInt64, ended: inout Bool) -> Int {
        var at = 0
        if !self.upgraded {
            guard let head = LineCounter.find(Array("\r\n\r\n".utf8), in: bytes) else { return 0 }
            self.upgraded = true
            self.greeted.succeed(())
            at = head + 4
        }
        while bytes.count - at >= 2 {
            let opcode = bytes[at] & 0x0F
            var length = Int(bytes[at + 1] & 0x7F)
            var header = 2
            if length == 126 {
                guard bytes.count - at >= 4 else { break }
                length = Int(bytes[at + 2]) << 8 | Int(bytes[at + 3])
                header = 4
            } else if length == 127 {
                guard bytes.count - at >= 10 else { break }
                length = (0..<8).reduce(0) { $0 << 8 | Int(bytes[at + 2 + $1]) }
                header = 10
            }
            guard bytes.count - at >= header + length else { break }
            if opcode == 1 || opcode == 2 {
                self.message(UnsafeRawBufferPointer(rebasing: bytes[(at + header)..<(at + header + length)]), now: now, ended: &ended)
            }
            at += header + length
        }
        return at
    }

    private func message(_ payload: UnsafeRawBufferPointer, now: UInt64, ended: inout Bool) {
        self.local.lines += 1
        self.local.messages += 1
        if LineCounter.find(self.end, in: payload) != nil {
            ended = true
            return
        }
        // `{"t":` + 20 digits (10^19 + ns) + `,"i":` + 11 digits (10^10 + index).
        guard payload.count > 40 else { return }
        let sent = LineCounter.number(at: 5, in: payload) &- LineCounter.timeBias
        let index = LineCounter.number(at: 30, in: payload) &- 10_000_000_000
        if let last = self.lastIndex, index > last + 1 { self.local.gaps += Int(index - last - 1) }
        self.lastIndex = index
        if sent > 0, sent < LineCounter.timeBias, now > sent { self.latencies.append((now - sent) / 1000) }
    }
}

@available(*, unavailable)
extension FrameCounter: Sendable {}
