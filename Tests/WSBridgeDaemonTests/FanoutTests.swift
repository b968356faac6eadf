import Logging
import NIOCore
import NIOEmbedded
import Testing
import WSBridgeCore
import WSBridgeProtocol

@testable import WSBridgeDaemon

/// The fan-out with the daemon's real parts on an embedded loop: clients on EmbeddedChannels,
/// upstream messages handed to it as the link would.
@Suite struct FanoutTests {
    final class Harness {
        let loop = EmbeddedEventLoop()
        let bridge: Bridge

        init(_ configure: (inout Configuration) -> Void = { _ in }) {
            var configuration = Configuration()
            configure(&configuration)
            self.bridge = Bridge(
                configuration: configuration, policy: AccessPolicy(), networkAvailable: true, connectors: ConnectorFactory(), eventLoop: self.loop,
                logger: Logger(label: "test"))
        }

        /// A connected client (past its hello line).
        func client() throws -> (EmbeddedChannel, LocalClient) {
            let client = self.bridge.plane.makeClient(credentials: nil, groups: [])
            let channel = EmbeddedChannel(loop: self.loop)
            try channel.pipeline.syncOperations.addHandlers([ByteToMessageHandler(NDJSONLineDecoder(maxLine: 4096)), client])
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
            _ = self.lines(channel)
            return (channel, client)
        }

        func request(_ channel: EmbeddedChannel, _ line: String) throws {
            try channel.writeInbound(ByteBuffer(string: line + "\n"))
            self.loop.run()
        }

        func upstream(_ text: String) {
            self.bridge.fanout.upstreamLink(self.bridge.link, emitted: .message(UpstreamMessage(.text(text))))
            self.loop.run()
        }

        /// The lines written to `channel` since the last call.
        func lines(_ channel: EmbeddedChannel) -> [JSONValue] {
            self.loop.run()
            var out: [JSONValue] = []
            while let buffer = try? channel.readOutbound(as: ByteBuffer.self) {
                for line in String(buffer: buffer).split(separator: "\n") { out.append((try? JSONValue.parse(String(line))) ?? .null) }
            }
            return out
        }

        deinit {
            _ = self.bridge.link.shutdown()
            self.loop.run()
        }
    }

    static func messages(_ lines: [JSONValue]) -> [String] {
        lines.filter { $0["type"] == "message" }.compactMap { $0["data"]?.stringValue }
    }

    @Test func everySubscriberGetsEveryMessageInOrderWithOneSequence() throws {
        let h = Harness()
        let (a, _) = try h.client()
        let (b, _) = try h.client()
        h.upstream(#"{"n":1}"#)
        h.upstream(#"{"n":2}"#)
        let la = h.lines(a)
        let lb = h.lines(b)
        #expect(Self.messages(la) == [#"{"n":1}"#, #"{"n":2}"#])
        #expect(Self.messages(lb) == Self.messages(la))
        #expect(la.compactMap { $0["seq"]?.intValue } == [1, 2])
        #expect(h.bridge.fanout.seq == 2)
    }

    @Test func aFilteredSubscriberGetsOnlyMatchesAndAnUnsubscribedClientNothing() throws {
        let h = Harness()
        let (filtered, _) = try h.client()
        let (off, _) = try h.client()
        try h.request(filtered, #"{"id":1,"op":"subscribe","filter":{"field":"ch","equals":"btc"}}"#)
        try h.request(off, #"{"id":2,"op":"unsubscribe"}"#)
        _ = h.lines(filtered)
        _ = h.lines(off)
        #expect(h.bridge.fanout.subscriberCount == 1)
        h.upstream(#"{"ch":"eth"}"#)
        h.upstream(#"{"ch":"btc"}"#)
        #expect(Self.messages(h.lines(filtered)) == [#"{"ch":"btc"}"#])
        #expect(Self.messages(h.lines(off)).isEmpty)
    }

    /// A waiting `request` (as the plane registers one once its send went out) is answered by
    /// the first matching upstream message, once; its count per client goes back to zero and
    /// its timeout timer is cancelled.
    @Test func aWaitingRequestIsAnsweredByTheFirstMatchOnceAndItsTimerIsCancelled() throws {
        let h = Harness()
        let (c, client) = try h.client()
        let pending = h.bridge.fanout
        let key = pending.pending.reserveKey()
        var timedOut = false
        let timer = h.loop.scheduleTask(in: .seconds(5)) { timedOut = true }
        pending.pending.insert(PendingRequests.Entry(client: client, id: "r", match: Filter(field: "re", equals: 1), timer: timer), key: key)
        #expect(pending.pending.count(of: client) == 1)
        h.upstream(#"{"re":2}"#)
        #expect(pending.pending.count == 1)
        h.upstream(#"{"re":1,"v":"x"}"#)
        h.upstream(#"{"re":1,"v":"y"}"#)
        let replies = h.lines(c).filter { $0["type"] == "reply" && $0["id"] == "r" }
        #expect(replies.count == 1, "\(replies)")
        #expect(replies.first?.value(at: "result.json.v") == "x")
        #expect(replies.first?.value(at: "result.seq") == 2)
        #expect(pending.pending.isEmpty && pending.pending.count(of: client) == 0)
        h.loop.advanceTime(by: .seconds(10))
        #expect(!timedOut, "the answered request's timeout still fired")
    }

    @Test func aClientThatGoesAwayTakesItsWaitingRequestsWithIt() throws {
        let h = Harness()
        let (c, client) = try h.client()
        let timer = h.loop.scheduleTask(in: .seconds(5)) {}
        h.bridge.fanout.pending.insert(
            PendingRequests.Entry(client: client, id: 1, match: Filter(field: "x", equals: nil), timer: timer), key: h.bridge.fanout.pending.reserveKey())
        try c.close().wait()
        h.loop.run()
        #expect(h.bridge.fanout.pending.isEmpty)
        #expect(h.bridge.fanout.clientCount == 0)
    }
}
