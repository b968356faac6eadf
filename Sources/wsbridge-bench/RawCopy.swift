import ArgumentParser
import NIOCore
import NIOPosix

#if canImport(Glibc)
    import Glibc
#endif

/// The transport's limit on this machine, a baseline: one process writing the same NDJSON lines a
/// bridge would (same format, same sizes) in 64 KiB batches to N readers on a Unix socket, with
/// no upstream, no parsing and no queues. The lines are encoded once, up front; every reader gets
/// the same buffers, as fast as its socket takes them. Starts once `--connections` readers are
/// connected; prints `done` when every reader has been sent everything.
struct RawCopy: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "raw-copy",
        abstract: "Baseline: write pre-encoded NDJSON message lines in 64 KiB batches to N readers."
    )

    @Option(help: "Unix socket to listen on.")
    var socket: String

    @Option(help: "Readers to wait for before writing.")
    var connections = 1

    @Option(help: "Messages (an end marker follows).")
    var messages = 100_000

    @Option(help: "Payload size in bytes.")
    var size = 100

    @Option(
        help: """
            Messages per second (0: flat out). At a rate, every millisecond the lines due by then \
            are encoded with the time of writing as their send stamp (as the generator does) and \
            written to every reader: the latency floor of these readers on this machine.
            """
    )
    var rate = 0

    func run() throws {
        let batches = self.rate > 0 ? [] : Self.encode(messages: self.messages, size: self.size)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { try? group.syncShutdownGracefully() }
        let loop = group.next()
        let expected = self.connections
        let (hub, allDone) = try loop.submit {
            let hub = Hub(batches: batches, expected: expected, eventLoop: loop)
            if self.rate > 0 { hub.paced = Paced(messages: self.messages, size: self.size, rate: self.rate) }
            return (NIOLoopBound(hub, eventLoop: loop), hub.allDone.futureResult)
        }.wait()
        let server = try ServerBootstrap(group: group)
            .childChannelOption(.writeBufferWaterMark, value: .init(low: 64 * 1024, high: 256 * 1024))
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(Feeder(hub: hub.value))
                }
            }
            .bind(unixDomainSocketPath: self.socket, cleanupExistingSocketFile: true).wait()
        emitLine("listening")
        try allDone.wait()
        emitLine("done")
        try? server.close().wait()
    }

    /// The message lines, as wsbridged writes them, cut into batches of about 64 KiB.
    static func encode(messages: Int, size: Int) -> [ByteBuffer] {
        var batches: [ByteBuffer] = []
        var batch = ByteBuffer()
        for seq in 1...(messages + 1) {
            batch.writeString(Self.line(seq: seq, of: messages, size: size, stamp: 0))
            if batch.readableBytes >= 64 * 1024 {
                batches.append(batch)
                batch = ByteBuffer()
            }
        }
        if batch.readableBytes > 0 { batches.append(batch) }
        return batches
    }
}

extension RawCopy {
    /// Message line `seq` (of `messages`, then the end marker), sent at CLOCK_MONOTONIC `stamp` ns.
    static func line(seq: Int, of messages: Int, size: Int, stamp: UInt64) -> String {
        let pad = String(repeating: "x", count: max(0, size - 48))
        let payload =
            seq <= messages
            ? #"{\"t\":1\#(String(stamp).leftPadded(19)),\"i\":1\#(String(seq - 1).leftPadded(10)),\"p\":\"\#(pad)\"}"#
            : #"{\"end\":\"__end__\"}"#
        return #"{"type":"message","seq":\#(seq),"ts":1795313566992,"kind":"text","data":"\#(payload)"}"# + "\n"
    }

    static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }
}

/// At a fixed rate: every millisecond, the lines due by then, stamped now, to every reader.
private struct Paced {
    let messages: Int
    let size: Int
    let rate: Int
    var sent = 0
    var started: UInt64 = 0

    init(messages: Int, size: Int, rate: Int) {
        self.messages = messages
        self.size = size
        self.rate = rate
    }

    /// The batch due now (the end marker with the last one), or nil when all was sent.
    mutating func due() -> ByteBuffer? {
        guard self.sent <= self.messages else { return nil }
        let now = RawCopy.now()
        if self.started == 0 { self.started = now }
        let due = min(self.messages, Int(Double(now - self.started) / 1e9 * Double(self.rate)) + 1)
        var batch = ByteBuffer()
        while self.sent < due {
            self.sent += 1
            batch.writeString(RawCopy.line(seq: self.sent, of: self.messages, size: self.size, stamp: now))
        }
        if self.sent == self.messages {
            self.sent += 1
            batch.writeString(RawCopy.line(seq: self.sent, of: self.messages, size: self.size, stamp: now))
        }
        return batch
    }
}

extension String {
    fileprivate func leftPadded(_ width: Int) -> String {
        String(repeating: "0", count: max(0, width - self.count)) + self
    }
}

/// Starts every reader once all have connected; completes when all were sent everything.
private final class Hub {
    let batches: [ByteBuffer]
    let expected: Int
    var feeders: [Feeder] = []
    var finished = 0
    let allDone: EventLoopPromise<Void>

    init(batches: [ByteBuffer], expected: Int, eventLoop: any EventLoop) {
        self.batches = batches
        self.expected = expected
        self.eventLoop = eventLoop
        self.allDone = eventLoop.makePromise()
    }

    var paced: Paced?
    private let eventLoop: any EventLoop

    func joined(_ feeder: Feeder) {
        self.feeders.append(feeder)
        if self.feeders.count == self.expected {
            if self.paced != nil {
                self.tick()
            } else {
                for f in self.feeders { f.start() }
            }
        }
    }

    /// Paced: one batch to every reader each millisecond (NIO buffers it if a reader is behind).
    private func tick() {
        guard let batch = self.paced?.due() else {
            for f in self.feeders { f.finishPaced() }
            return
        }
        if batch.readableBytes > 0 {
            for f in self.feeders { f.writePaced(batch) }
        }
        self.eventLoop.assumeIsolated().scheduleTask(in: .milliseconds(1)) { self.tick() }
    }

    func feederFinished() {
        self.finished += 1
        if self.finished == self.expected { self.allDone.succeed(()) }
    }
}

/// Writes the batches to one reader while its socket takes them.
private final class Feeder: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    private let hub: Hub
    private var context: ChannelHandlerContext?
    private var next = -1

    init(hub: Hub) {
        self.hub = hub
    }

    func channelActive(context: ChannelHandlerContext) {
        self.context = context
        self.hub.joined(self)
        context.fireChannelActive()
    }

    func start() {
        self.next = 0
        self.pump()
    }

    private func pump() {
        guard let context = self.context, self.next >= 0, self.next < self.hub.batches.count else { return }
        while self.next < self.hub.batches.count, context.channel.isWritable {
            let last = self.next == self.hub.batches.count - 1
            // Done once the last batch is in the kernel, not merely queued in NIO.
            let promise = last ? context.eventLoop.makePromise(of: Void.self) : nil
            promise?.futureResult.assumeIsolated().whenComplete { _ in self.hub.feederFinished() }
            context.write(Self.wrapOutboundOut(self.hub.batches[self.next]), promise: promise)
            self.next += 1
        }
        context.flush()
    }

    func writePaced(_ batch: ByteBuffer) {
        self.context?.writeAndFlush(Self.wrapOutboundOut(batch), promise: nil)
    }

    /// Done once everything written is in the kernel.
    func finishPaced() {
        guard let context = self.context else { return self.hub.feederFinished() }
        context.writeAndFlush(Self.wrapOutboundOut(context.channel.allocator.buffer(capacity: 0))).assumeIsolated().whenComplete { _ in
            self.hub.feederFinished()
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { self.pump() }
        context.fireChannelWritabilityChanged()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}
}
