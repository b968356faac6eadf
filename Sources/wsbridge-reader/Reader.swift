import ArgumentParser
import Histogram
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import WSBridgeCore
import WSBridgeDaemon
import WSBridgeProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// A benchmark subscriber in its own process: opens N connections to a bridge's Unix socket,
/// counts message lines, checks `seq` continuity (or, `--websocket`, WebSocket frames), and stops when every connection has seen the
/// end marker (or has been idle too long). Prints `ready` once connected, then one JSON result
/// line. `--stall` connects and never reads; `--slow-us` sleeps after every line.
@main
struct Reader: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "wsbridge-reader",
        abstract: "Benchmark subscriber: counts NDJSON message lines on N Unix-socket connections."
    )

    @Option(help: "The bridge's Unix socket.")
    var socket: String = ""

    @Option(help: "Connections to open.")
    var connections = 1

    @Option(help: "A message containing this text ends the run.")
    var end = "__end__"

    @Option(help: "Give up after this many seconds without a line.")
    var idle = 30

    @Flag(help: "Connect and never read (a stalled subscriber).")
    var stall = false

    @Option(help: "Sleep this many microseconds after each line (a slow subscriber).")
    var slowUs = 0

    @Option(help: "Subscribe with this since (a consumer replaying what the bridge keeps: its ring, its journal).")
    var since: UInt64?

    @Option(help: "A request line each connection sends once connected (e.g. a sticky send that subscribes, under a protocol).")
    var send: String?

    @Option(help: "Read the generator itself over WebSocket (the no-bridge baseline) instead of a bridge's socket.")
    var upstream: String?

    @Flag(help: "The socket is a WebSocket server's (wsbridged's WebSocket face, a relay): read frames, not NDJSON lines.")
    var websocket = false

    func run() throws {
        if let upstream {
            try self.runDirect(upstream)
            return
        }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { try? group.syncShutdownGracefully() }
        let state = NIOLockedValueBox(Totals())
        let finished = group.next().makePromise(of: Void.self)
        var channels: [any Channel] = []
        var greetings: [EventLoopFuture<Void>] = []
        for _ in 0..<self.connections {
            let end = Array(self.end.utf8)
            let slow = self.slowUs
            let stall = self.stall
            let greeted = group.next().makePromise(of: Void.self)
            greetings.append(greeted.futureResult)
            let bootstrap = ClientBootstrap(group: group)
                .channelOption(.autoRead, value: !stall)
                .channelInitializer { [websocket = self.websocket, connections = self.connections] ch in
                    ch.eventLoop.makeCompletedFuture {
                        if websocket {
                            try ch.pipeline.syncOperations.addHandler(
                                FrameCounter(end: end, totals: state, connections: connections, finished: finished, greeted: greeted))
                            return
                        }
                        try ch.pipeline.syncOperations.addHandler(
                            LineCounter(
                                end: end, slowMicroseconds: slow, totals: state, connections: self.connections, finished: finished, greeted: greeted,
                                greetingLines: self.send == nil ? 1 : 2)
                        )
                    }
                }
            // A bridge's socket path appears at bind(2), a moment before it listens: retry briefly.
            var attempt = 0
            while true {
                do {
                    channels.append(try bootstrap.connect(unixDomainSocketPath: self.socket).wait())
                    break
                } catch  where attempt < 500 {
                    attempt += 1
                    usleep(10_000)
                }
            }
        }
        if let since = self.since {
            for channel in channels {
                channel.writeAndFlush(ByteBuffer(string: "{\"id\":\"r\",\"op\":\"subscribe\",\"since\":\(since)}\n"), promise: nil)
            }
        }
        if let send = self.send {
            for channel in channels { channel.writeAndFlush(ByteBuffer(string: send + "\n"), promise: nil) }
        }
        // Ready once every connection has its hello: the bridge has it as a subscriber then, so
        // it gets every message the generator sends from now on (a stalled one reads nothing).
        if !self.stall {
            for greeting in greetings { try greeting.wait() }
        }
        emit("ready")
        if self.stall {
            // Hold the connections until told to stop (stdin closes).
            while readLine() != nil {}
        } else {
            let loop = group.next()
            let lastLines = NIOLockedValueBox(-1)
            let watchdog = loop.scheduleRepeatedTask(initialDelay: .seconds(Int64(self.idle)), delay: .seconds(Int64(self.idle))) { _ in
                let lines = state.withLockedValue { $0.lines }
                if lines == lastLines.withLockedValue({ $0 }) { finished.succeed(()) }
                lastLines.withLockedValue { $0 = lines }
            }
            try finished.futureResult.wait()
            watchdog.cancel()
        }
        let t = state.withLockedValue { $0 }
        emit(t.json(connections: self.connections))
        for c in channels { try? c.close().wait() }
    }
}

extension Reader {
    /// One plain WebSocket client (wsbridged's own link, no local plane) on the generator.
    func runDirect(_ url: String) throws {
        var configuration = Configuration()
        configuration.upstream.url = try UpstreamURL(parsing: url)
        configuration.upstream.compression = false
        configuration.reachability.enabled = false
        configuration.proxy.useEnvironment = false
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { try? group.syncShutdownGracefully() }
        let totals = NIOLockedValueBox(Totals())
        let finished = group.next().makePromise(of: Void.self)
        var logger = Logger(label: "wsbridge-reader")
        logger.logLevel = .critical
        let link = try UpstreamLinkHandle.make(
            configuration: configuration,
            networkAvailable: true,
            environment: [:],
            eventLoop: group.next(),
            logger: logger,
            onEvent: { event in
                switch event {
                case .state(.open, _, _):
                    emit("ready")
                case .message(let message):
                    let now = monotonicNanos()
                    let ended = message.data.withUnsafeReadableBytes { bytes -> Bool in
                        if LineCounter.find(Array("__end__".utf8), in: bytes) != nil { return true }
                        // `{"t":` + 20 digits (10^19 + ns) + `,"i":` + 11 digits (10^10 + index).
                        let sent = LineCounter.number(at: 5, in: bytes) &- LineCounter.timeBias
                        let index = LineCounter.number(at: 30, in: bytes) &- 10_000_000_000
                        totals.withLockedValue { t in
                            t.messages += 1
                            if t.lines > 0, index > UInt64(t.lines) { t.gaps += Int(index) - t.lines }
                            t.lines = Int(index) + 1
                            if now > sent { _ = t.latency.record((now - sent) / 1000) }
                            if t.firstNanos == 0 { t.firstNanos = now }
                            t.lastNanos = now
                        }
                        return false
                    }
                    if ended {
                        totals.withLockedValue {
                            $0.ended = 1
                            $0.messages += 1
                        }
                        finished.succeed(())
                    }
                default:
                    break
                }
            }
        ).wait()
        link.connect()
        try finished.futureResult.wait()
        emit(totals.withLockedValue { $0 }.json(connections: 1))
        try? link.shutdown().wait()
    }
}

struct Totals {
    /// Upstream send → read here, in microseconds (the generator stamps each message).
    var latency = Histogram<UInt64>(highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: .three)
    var lines = 0
    var messages = 0
    /// Messages the bridge reported dropped, and seq jumps it did not report.
    var lost = 0
    var gaps = 0
    var ended = 0
    var firstNanos: UInt64 = 0
    var lastNanos: UInt64 = 0
}

extension NIOLockedValueBox<Totals> {
    /// A connection's counts of one read (`delta`, its `latencies`) added under the lock, and
    /// emptied; whether every connection has seen the end marker now.
    func add(_ delta: inout Totals, latencies: inout [UInt64], ended: Bool, at now: UInt64, connections: Int) -> Bool {
        let (d, l) = (delta, latencies)
        delta = Totals()
        latencies.removeAll(keepingCapacity: true)
        return self.withLockedValue { t -> Bool in
            for latency in l { _ = t.latency.record(latency) }
            t.lines += d.lines
            t.messages += d.messages
            t.lost += d.lost
            t.gaps += d.gaps
            t.ended += ended ? 1 : 0
            if t.firstNanos == 0 { t.firstNanos = now }
            t.lastNanos = now
            return t.ended == connections
        }
    }
}

extension Totals {
    /// The result line the benchmark reads.
    func json(connections: Int) -> String {
        let l = self.latency
        let p = l.totalCount > 0 ? [l.valueAtPercentile(50), l.valueAtPercentile(99), l.valueAtPercentile(99.9), l.max] : [0, 0, 0, 0]
        return #"{"connections":\#(connections),"messages":\#(self.messages),"lost":\#(self.lost),"gaps":\#(self.gaps),"ended":\#(self.ended),"#
            + #""first_ns":\#(self.firstNanos),"last_ns":\#(self.lastNanos),"latency_count":\#(l.totalCount),"#
            + #""p50_us":\#(p[0]),"p99_us":\#(p[1]),"p999_us":\#(p[2]),"max_us":\#(p[3])}"#
    }
}

/// One line to stdout, unbuffered (the benchmark waits for it).
func emit(_ line: String) {
    var text = line + "\n"
    text.withUTF8 { bytes in _ = write(1, bytes.baseAddress, bytes.count) }
}

func monotonicNanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// Splits lines without decoding JSON: finds `"seq":N`, `"type":"dropped"` with `"count":N`, and
/// the end marker.
final class LineCounter: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let end: [UInt8]
    private let slowMicroseconds: Int
    private let totals: NIOLockedValueBox<Totals>
    private let connections: Int
    private let finished: EventLoopPromise<Void>
    /// Succeeded by the first line (the bridge's hello).
    private let greeted: EventLoopPromise<Void>
    private var hasGreeted = false
    /// Lines that make the greeting: the hello (and the reply to `--send`).
    private let greetingLines: Int
    private var linesSeen = 0
    private var partial: [UInt8] = []
    private var lastSeq: UInt64?
    private var local = Totals()
    /// This read's latencies, recorded under the lock once per read.
    private var latencies: [UInt64] = []
    private var now: UInt64 = 0

    init(
        end: [UInt8], slowMicroseconds: Int, totals: NIOLockedValueBox<Totals>, connections: Int, finished: EventLoopPromise<Void>,
        greeted: EventLoopPromise<Void>, greetingLines: Int = 1
    ) {
        self.greeted = greeted
        self.greetingLines = greetingLines
        self.end = end
        self.slowMicroseconds = slowMicroseconds
        self.totals = totals
        self.connections = connections
        self.finished = finished
    }

    func channelInactive(context: ChannelHandlerContext) {
        // Closed before any line (refused): nothing to wait for.
        self.greeted.succeed(())
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = Self.unwrapInboundIn(data)
        var ended = false
        self.now = monotonicNanos()
        buffer.withUnsafeReadableBytes { bytes in
            var start = 0
            while let nl = bytes[start...].firstIndex(of: 0x0A) {
                if self.partial.isEmpty {
                    ended = self.line(UnsafeRawBufferPointer(rebasing: bytes[start..<nl])) || ended
                } else {
                    self.partial.append(contentsOf: bytes[start..<nl])
                    ended = self.partial.withUnsafeBytes { self.line($0) } || ended
                    self.partial.removeAll(keepingCapacity: true)
                }
                start = nl + 1
            }
            self.partial.append(contentsOf: bytes[start...])
        }
        if self.totals.add(&self.local, latencies: &self.latencies, ended: ended, at: self.now, connections: self.connections) {
            self.finished.succeed(())
        }
    }

    private static let messagePrefix = Array(#"{"type":"message","seq":"#.utf8)
    private static let droppedType = Array(#""type":"dropped""#.utf8)
    private static let countKey = Array(#""count":"#.utf8)
    private static let toKey = Array(#""to":"#.utf8)
    /// The generator's send time inside the escaped payload: `\"t\":` + 10^19 + ns.
    private static let timeKey = Array(#"\"t\":"#.utf8)
    static let timeBias: UInt64 = 10_000_000_000_000_000_000

    /// Returns true for the end marker.
    private func line(_ line: UnsafeRawBufferPointer) -> Bool {
        self.local.lines += 1
        self.linesSeen += 1
        if !self.hasGreeted, self.linesSeen >= self.greetingLines {
            self.hasGreeted = true
            self.greeted.succeed(())
        }
        if self.slowMicroseconds > 0 { usleep(UInt32(self.slowMicroseconds)) }
        let prefix = Self.messagePrefix
        if line.count > prefix.count, memcmp(line.baseAddress!, prefix, prefix.count) == 0 {
            let seq = Self.number(at: prefix.count, in: line)
            self.local.messages += 1
            if let last = self.lastSeq, seq > last + 1 { self.local.gaps += Int(seq - last - 1) }
            self.lastSeq = seq
            if let at = Self.find(Self.timeKey, in: line) {
                let sent = Self.number(at: at + Self.timeKey.count, in: line) &- Self.timeBias
                if sent > 0, sent < Self.timeBias, self.now > sent { self.latencies.append((self.now - sent) / 1000) }
            }
            return Self.find(self.end, in: line) != nil
        }
        if Self.find(Self.droppedType, in: line) != nil {
            if let at = Self.find(Self.countKey, in: line) { self.local.lost += Int(Self.number(at: at + Self.countKey.count, in: line)) }
            if let at = Self.find(Self.toKey, in: line) { self.lastSeq = Self.number(at: at + Self.toKey.count, in: line) }
        }
        return false
    }

    static func find(_ needle: [UInt8], in haystack: UnsafeRawBufferPointer) -> Int? {
        guard let base = haystack.baseAddress, !needle.isEmpty, haystack.count >= needle.count else { return nil }
        var from = 0
        let last = haystack.count - needle.count
        while from <= last, let hit = memchr(base + from, Int32(needle[0]), last - from + 1) {
            let at = base.distance(to: UnsafeRawPointer(hit))
            if memcmp(base + at, needle, needle.count) == 0 { return at }
            from = at + 1
        }
        return nil
    }

    static func number(at index: Int, in line: UnsafeRawBufferPointer) -> UInt64 {
        var value: UInt64 = 0
        var j = index
        while j < line.count, line[j] >= 0x30, line[j] <= 0x39 {
            value = value &* 10 &+ UInt64(line[j] - 0x30)
            j += 1
        }
        return value
    }
}

@available(*, unavailable)
extension LineCounter: Sendable {}
