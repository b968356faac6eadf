import NIOCore
import NIOWebSocket

#if canImport(Glibc)
    import Glibc
#endif

/// The benchmark generator: pre-encoded text frames written straight to the socket in 64 KiB
/// batches (no frame encoder, no per-message allocation), flat out while the connection takes
/// them, or at a fixed rate. Each message carries its send time and index in fixed-width fields
/// patched in place, as valid JSON numbers (a leading 1, so no leading zeros):
/// `{"t":1<19 digits: CLOCK_MONOTONIC ns>,"i":1<10 digits>,"p":"xxx…"}`, i.e. t = 10^19 + ns and
/// i = 10^10 + index. The run ends with a `__end__` message. Sits in front of the frame encoder; other writes pass.
final class FloodWriter: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    typealias InboundOut = NIOAny
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private var context: ChannelHandlerContext?
    private var frame: [UInt8] = []
    /// The end marker, in the flood's format.
    private var end = Array(#"{"end":"__end__"}"#.utf8)
    private var timeOffset = 0
    private var indexOffset = 0
    private var remaining = 0
    private var sent = 0
    private var rate = 0
    private var started: UInt64 = 0
    private var timer: Scheduled<Void>?
    private static let batchBytes = 64 * 1024

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.timer?.cancel()
        self.context = nil
    }

    /// Sends `count` messages of `size` bytes; `rate` per second, or flat out when 0. `id`: each
    /// message starts `{"id":ID,` (an answer to a subscription, under a protocol). `format`: the
    /// JSON inside a text protocol's message (`socketio`: an event `42["tick",{…}]`; `stomp`: a
    /// MESSAGE of subscription 1; `nats`: a MSG of sid 1; `jsonrpc`: an `eth_subscription` of
    /// server id `0x1`; `graphql-transport-ws`: a `next` of id 1).
    func start(count: Int, size: Int, rate: Int, id: Int? = nil, format: String = "json") {
        let head = (id.map { #"{"id":\#($0),"# } ?? "{") + #""t":10000000000000000000,"i":10000000000,"p":""#
        let json = Array(head.utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: max(0, size - head.utf8.count - 2)) + Array(#""}"#.utf8)
        let payload = Self.wrap(json, format: format)
        self.end = Self.wrap(Array(#"{"end":"__end__"}"#.utf8), format: format)
        self.frame = Self.header(length: payload.count) + payload
        // The digits after `"t":1` and `"i":1`.
        let t = Array(#""t":1"#.utf8)
        let at = (0...(payload.count - t.count)).first { Array(payload[$0..<($0 + t.count)]) == t } ?? 0
        self.timeOffset = self.frame.count - payload.count + at + t.count
        self.indexOffset = self.timeOffset + 19 + 6
        self.remaining = count
        self.sent = 0
        self.rate = rate
        self.started = Self.now()
        self.timer?.cancel()
        if rate > 0 { self.tick() } else { self.pump() }
    }

    static func header(length: Int) -> [UInt8] {
        if length < 126 { return [0x81, UInt8(length)] }
        if length < 65536 { return [0x81, 126, UInt8(length >> 8), UInt8(length & 0xFF)] }
        return [0x81, 127] + (0..<8).reversed().map { UInt8((UInt64(length) >> (UInt64($0) * 8)) & 0xFF) }
    }

    static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    /// Writes up to `limit` messages in batches, stamped with the time of writing.
    private func write(upTo limit: Int, context: ChannelHandlerContext) -> Int {
        var written = 0
        let perBatch = max(1, Self.batchBytes / self.frame.count)
        while written < limit, self.remaining > 0, context.channel.isWritable {
            let n = min(perBatch, limit - written, self.remaining)
            var batch = context.channel.allocator.buffer(capacity: n * self.frame.count)
            let stamp = Self.now()
            for _ in 0..<n {
                let start = batch.writerIndex
                batch.writeBytes(self.frame)
                Self.digits(stamp, width: 19, into: &batch, at: start + self.timeOffset)
                Self.digits(UInt64(self.sent), width: 10, into: &batch, at: start + self.indexOffset)
                self.sent += 1
            }
            self.remaining -= n
            written += n
            context.write(Self.wrapOutboundOut(batch), promise: nil)
        }
        if written > 0 { context.flush() }
        if self.remaining == 0 { self.finish(context) }
        return written
    }

    private static func digits(_ value: UInt64, width: Int, into buffer: inout ByteBuffer, at index: Int) {
        var v = value
        for i in (0..<width).reversed() {
            buffer.setInteger(UInt8(ascii: "0") + UInt8(v % 10), at: index + i)
            v /= 10
        }
    }

    /// `json` as the message of a text protocol (or as it is).
    static func wrap(_ json: [UInt8], format: String) -> [UInt8] {
        switch format {
        case "socketio": Array(#"42["tick","#.utf8) + json + Array("]".utf8)
        case "stomp": Array("MESSAGE\nsubscription:1\ndestination:/topic/a\nmessage-id:m\ncontent-length:\(json.count)\n\n".utf8) + json + [0]
        case "nats": Array("MSG a 1 \(json.count)\r\n".utf8) + json + Array("\r\n".utf8)
        case "jsonrpc": Array(#"{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","result":"#.utf8) + json + Array("}}".utf8)
        case "graphql-transport-ws": Array(#"{"type":"next","id":"1","payload":"#.utf8) + json + Array("}".utf8)
        default: json
        }
    }

    private func finish(_ context: ChannelHandlerContext) {
        guard self.frame.count > 0 else { return }
        self.frame = []
        self.timer?.cancel()
        let end = self.end
        var buffer = context.channel.allocator.buffer(capacity: end.count + 2)
        buffer.writeBytes(Self.header(length: end.count) + end)
        context.writeAndFlush(Self.wrapOutboundOut(buffer), promise: nil)
        let seconds = Double(Self.now() - self.started) / 1e9
        Output.line("flood done \(self.sent) in \(seconds) s")
    }

    /// Flat out: while the socket takes it.
    private func pump() {
        guard let context = self.context, self.remaining > 0 else { return }
        _ = self.write(upTo: .max, context: context)
    }

    /// At `rate`: every millisecond, the messages due by now (a slow socket only delays them).
    private func tick() {
        guard let context = self.context, self.remaining > 0 else { return }
        let due = Int(Double(Self.now() - self.started) / 1e9 * Double(self.rate)) + 1
        _ = self.write(upTo: max(0, due - self.sent), context: context)
        guard self.remaining > 0 else { return }
        self.timer = context.eventLoop.assumeIsolated().scheduleTask(in: .milliseconds(1)) { self.tick() }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable && self.rate == 0 { self.pump() }
        context.fireChannelWritabilityChanged()
    }
}

@available(*, unavailable)
extension FloodWriter: Sendable {}
