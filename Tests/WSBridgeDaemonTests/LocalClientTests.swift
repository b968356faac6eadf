import Logging
import NIOCore
import NIOEmbedded
import Testing
import WSBridgeCore

@testable import WSBridgeDaemon

/// A local client's handler on an EmbeddedChannel, with the daemon's real parts behind it (a
/// `Bridge` on the embedded loop; its link is never connected).
@Suite struct LocalClientTests {
    /// Records the reads NIO is asked for, and whether the channel was still active then.
    final class ReadRecorder: ChannelOutboundHandler {
        typealias OutboundIn = ByteBuffer
        var reads = 0

        func read(context: ChannelHandlerContext) {
            self.reads += 1
            context.read()
        }
    }

    /// A client whose turn ran out pauses, and is read again when the pause ends; one that
    /// goes away during its pause leaves no timer behind (the pause's end does not hold it,
    /// or act on its closed channel).
    @Test func aClientGoneDuringItsPauseLeavesNoTimerBehind() throws {
        let loop = EmbeddedEventLoop()
        let bridge = Bridge(
            configuration: Configuration(), policy: AccessPolicy(), networkAvailable: true,
            connectors: ConnectorFactory(), eventLoop: loop, logger: Logger(label: "test"))
        defer {
            _ = bridge.link.shutdown()
            loop.run()
        }
        // More requests in one read than a turn holds: the client pauses for RequestPacing.pause.
        let lines = ByteBuffer(string: String(repeating: "{\"op\":\"status\"}\n", count: RequestPacing.linesPerTurn + 10))
        func pausedClient() throws -> (EmbeddedChannel, ReadRecorder, LocalClient) {
            let recorder = ReadRecorder()
            let client = bridge.plane.makeClient(credentials: nil, groups: [])
            let channel = EmbeddedChannel(loop: loop)
            try channel.pipeline.syncOperations.addHandlers([recorder, ByteToMessageHandler(NDJSONLineDecoder(maxLine: 1024)), client])
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
            try channel.writeInbound(lines)
            // NIO asks to read again while the client is paused: held back until the pause ends.
            channel.read()
            return (channel, recorder, client)
        }

        let (staying, recorder, _) = try pausedClient()
        #expect(recorder.reads == 0)
        loop.advanceTime(by: .milliseconds(1))
        #expect(recorder.reads == 1, "the pause ended and the held-back read went on")
        _ = try staying.finish()

        weak var gone: LocalClient?
        do {
            let (leaving, _, client) = try pausedClient()
            gone = client
            // Not `finish()`: it cancels every scheduled task, the pause's end too.
            try leaving.close().wait()
            loop.run()
        }
        #expect(gone == nil, "the pause's timer still holds the closed client")
        loop.advanceTime(by: .milliseconds(1))
    }

    /// A client that drops messages lags until its queue empties (or it leaves); when the last
    /// lagging client caught up the daemon gives free memory back (malloc_trim), at once, or a
    /// second after the last time, once for every laggard that caught up meanwhile.
    @Test func memoryGoesBackOnceEveryLaggardCaughtUp() throws {
        let h = FanoutTests.Harness {
            $0.local.subscriberQueue = 4
            $0.local.subscriberQueueBurst = .zero
        }
        let loop = h.loop
        let memory = h.bridge.plane.memory
        var seq: UInt64 = 0
        /// Ten lines to a client whose socket takes nothing: it drops six.
        func stall(_ channel: EmbeddedChannel, _ client: LocalClient) {
            channel.isWritable = false
            for _ in 0..<10 {
                seq += 1
                client.deliver(ByteBuffer(string: "{\"seq\":\(seq)}\n"), seq: seq)
            }
            loop.run()
        }
        func catchUp(_ channel: EmbeddedChannel) {
            channel.isWritable = true
            channel.pipeline.fireChannelWritabilityChanged()
            loop.run()
        }
        let (a, clientA) = try h.client()
        let (b, clientB) = try h.client()
        stall(a, clientA)
        stall(b, clientB)
        stall(a, clientA)  // a lag is counted once, however much it drops
        #expect(memory.laggards == 2 && clientA.drops == 16 && clientB.drops == 6)
        catchUp(a)
        #expect(memory.laggards == 1 && memory.returns == 0, "b still lags")
        catchUp(b)
        #expect(memory.laggards == 0 && memory.returns == 1)
        // Within the second: once, when it is over, for both lags that ended meanwhile.
        stall(a, clientA)
        catchUp(a)
        stall(b, clientB)
        catchUp(b)
        #expect(memory.laggards == 0 && memory.returns == 1)
        loop.advanceTime(by: MemoryReturn.interval)
        #expect(memory.returns == 2)
        // A laggard that leaves has caught up too.
        loop.advanceTime(by: MemoryReturn.interval)
        stall(a, clientA)
        _ = try a.finish()
        #expect(memory.laggards == 0 && memory.returns == 3)
        _ = try b.finish()
    }

    /// The replies to the requests of one read go out in one write, in request order, and a
    /// message line queued between them keeps its place.
    @Test func repliesInARowGoOutInOneWrite() throws {
        let h = FanoutTests.Harness()
        let loop = h.loop
        let (channel, client) = try h.client()
        try channel.writeInbound(ByteBuffer(string: #"{"id":1,"op":"status"}"# + "\n" + #"{"id":2,"op":"status"}"# + "\n"))
        client.deliver(ByteBuffer(string: "{\"seq\":1}\n"), seq: 1)
        try channel.writeInbound(ByteBuffer(string: #"{"id":3,"op":"status"}"# + "\n" + #"{"id":4,"op":"nonsense"}"# + "\n"))
        loop.run()
        var writes: [[String]] = []
        while let buffer = try channel.readOutbound(as: ByteBuffer.self) {
            writes.append(String(buffer: buffer).split(separator: "\n").map(String.init))
        }
        #expect(writes.count == 3, "\(writes)")
        #expect(writes.first?.count == 2 && writes.first?.allSatisfy { $0.contains("\"ok\":true") } == true, "\(writes)")
        #expect(writes.first?.first?.contains("\"id\":1,") == true && writes.last?.first?.contains("\"id\":3,") == true)
        #expect(writes.dropFirst().first == ["{\"seq\":1}"])
        #expect(writes.last?.count == 2 && writes.last?.last?.contains("unknown_op") == true, "\(writes)")
        _ = try channel.finish()
    }
}
