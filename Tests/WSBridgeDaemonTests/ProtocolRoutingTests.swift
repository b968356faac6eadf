import Logging
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing
import WSBridgeCore
import WSBridgeProtocol

@testable import WSBridgeDaemon

/// Routing with `upstream.protocol` on an `EmbeddedEventLoop`: the daemon's real parts (`Bridge`)
/// with its local clients on `EmbeddedChannel`s and its upstream connection an embedded dial. Apps
/// that subscribe to the same thing share one upstream subscription; each gets its own answer
/// under its own id; a subscription's events go to its holders only. No server, no sleep.
@Suite struct ProtocolRoutingTests {
    typealias Dial = UpstreamLinkDriverTests.EmbeddedDialer.Dial

    final class Harness {
        let loop = EmbeddedEventLoop()
        let dialer: UpstreamLinkDriverTests.EmbeddedDialer
        let bridge: Bridge

        init(protocol name: String, upstream: String = "") throws {
            var configuration = try ConfigurationLoader(fileName: "test.toml").load(
                text: "[upstream]\nurl = \"ws://127.0.0.1:9/\"\nprotocol = \"\(name)\"\n\(upstream)")
            configuration.heartbeat.interval = .seconds(1000)
            self.dialer = UpstreamLinkDriverTests.EmbeddedDialer(loop: self.loop)
            var logger = Logger(label: "wsbridge.test")
            logger.logLevel = .critical
            self.bridge = Bridge(
                configuration: configuration, policy: AccessPolicy(writeUIDs: [1000]), networkAvailable: true, connectors: self.dialer, eventLoop: self.loop,
                logger: logger)
        }

        deinit {
            _ = self.bridge.link.shutdown()
            self.loop.run()
            self.loop.advanceTime(by: UpstreamLink.closeTimeout)
        }

        /// Connects and opens the upstream connection.
        func open() -> Dial {
            self.bridge.link.connect()
            self.loop.run()
            self.dialer.last.upgraded()
            self.loop.run()
            return self.dialer.last
        }

        /// A connected client (an app of uid 1000, which may send), past its hello line.
        func client() throws -> EmbeddedChannel {
            let client = self.bridge.plane.makeClient(credentials: PeerCredentials(pid: 4242, uid: 1000, gid: 1000), groups: [])
            let channel = EmbeddedChannel(loop: self.loop)
            try channel.pipeline.syncOperations.addHandlers([ByteToMessageHandler(NDJSONLineDecoder(maxLine: 4096)), client])
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
            _ = self.messages(channel)
            return channel
        }

        /// The app's protocol message, sent as its NDJSON `send`.
        func send(_ channel: EmbeddedChannel, _ json: String) throws {
            let line: JSONValue = ["op": "send", "text": .string(json)]
            try channel.writeInbound(ByteBuffer(string: line.serialized + "\n"))
            self.loop.run()
        }

        /// The protocol messages the app got since the last call (its message lines' data).
        func messages(_ channel: EmbeddedChannel) -> [JSONValue] {
            self.loop.run()
            var out: [JSONValue] = []
            while let buffer = try? channel.readOutbound(as: ByteBuffer.self) {
                for line in String(buffer: buffer).split(separator: "\n") {
                    guard let value = try? JSONValue.parse(String(line)), value["type"] == "message", let data = value["data"] else { continue }
                    out.append(data.stringValue.flatMap { try? JSONValue.parse($0) } ?? data)
                }
            }
            return out
        }

        /// The app's answers since the last call: each one's id and result.
        func answers(_ channel: EmbeddedChannel) -> [[JSONValue?]] { self.messages(channel).map { [$0["id"], $0["result"]] } }

        /// The subscription events the app got since the last call: each one's result.
        func events(_ channel: EmbeddedChannel) -> [JSONValue?] { self.messages(channel).map { $0["params"]?["result"] } }

        /// The upstream's event of subscription `id`, with `result`.
        static func event(_ id: String, _ result: Int) -> String {
            #"{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"\#(id)","result":\#(result)}}"#
        }

        /// What the link wrote upstream since the last call (text frames, parsed).
        static func upstream(_ dial: Dial) throws -> [JSONValue] {
            try dial.written().compactMap { $0.opcode == .text ? try? JSONValue.parse(String(buffer: $0.data)) : nil }
        }
    }

    @Test func appsShareOneUpstreamSubscriptionAndEachGetsOnlyWhatItHolds() throws {
        let h = try Harness(protocol: "jsonrpc")
        let dial = h.open()
        let a = try h.client()
        let b = try h.client()
        let c = try h.client()
        // a subscribes to new heads: it goes upstream under the daemon's id.
        try h.send(a, #"{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}"#)
        let first = try Harness.upstream(dial)
        #expect(first.count == 1 && first.first?["method"] == "eth_subscribe", "\(first)")
        let heads = try #require(first.first?["id"])
        try dial.receive(text: #"{"jsonrpc":"2.0","id":\#(heads.serialized),"result":"0xs1"}"#)
        #expect(h.answers(a) == [[1, "0xs1"]])
        // b subscribes to the same: nothing more goes upstream; its answer, under its own id.
        try h.send(b, #"{"jsonrpc":"2.0","id":7,"method":"eth_subscribe","params":["newHeads"]}"#)
        #expect(try Harness.upstream(dial).isEmpty)
        #expect(h.answers(b) == [[7, "0xs1"]])
        // c subscribes to something else, with a's id: its own upstream subscription.
        try h.send(c, #"{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["logs"]}"#)
        let second = try Harness.upstream(dial)
        #expect(second.count == 1 && second.first?["params"] == ["logs"], "\(second)")
        let logs = try #require(second.first?["id"])
        #expect(logs != heads)
        try dial.receive(text: #"{"jsonrpc":"2.0","id":\#(logs.serialized),"result":"0xs2"}"#)
        #expect(h.answers(c) == [[1, "0xs2"]])
        #expect(h.messages(a).isEmpty && h.messages(b).isEmpty)
        // Each subscription's events reach its holders, and no one else.
        try dial.receive(text: Harness.event("0xs1", 1))
        try dial.receive(text: Harness.event("0xs2", 2))
        #expect(h.events(a) == [1] && h.events(b) == [1] && h.events(c) == [2])
    }

    @Test func aPoolPlacesEachSubscriptionOnAConnectionAndRoutesItsEventsFromThere() throws {
        let h = try Harness(protocol: "jsonrpc", upstream: "subscriptions_per_connection = 1\nconnections = 2\n")
        let first = h.open()
        let a = try h.client()
        let b = try h.client()
        let c = try h.client()
        try h.send(a, #"{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}"#)
        let heads = try #require(try Harness.upstream(first).first?["id"])
        try first.receive(text: #"{"jsonrpc":"2.0","id":\#(heads.serialized),"result":"0xs1"}"#)
        #expect(h.answers(a) == [[1, "0xs1"]])
        // The first connection is full: a second subscription opens the second connection and
        // goes there (once it is open), not on the first.
        try h.send(b, #"{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["logs"]}"#)
        #expect(h.dialer.all.count == 2)
        #expect(try Harness.upstream(first).isEmpty)
        let second = h.dialer.last
        second.upgraded()
        h.loop.run()
        let logs = try #require(try Harness.upstream(second).first { $0["params"] == ["logs"] }?["id"])
        try second.receive(text: #"{"jsonrpc":"2.0","id":\#(logs.serialized),"result":"0xs2"}"#)
        #expect(h.answers(b) == [[1, "0xs2"]])
        // The same subscription again shares the connection that holds it: nothing new goes.
        try h.send(c, #"{"jsonrpc":"2.0","id":3,"method":"eth_subscribe","params":["logs"]}"#)
        #expect(try Harness.upstream(first).isEmpty && Harness.upstream(second).isEmpty)
        #expect(h.answers(c) == [[3, "0xs2"]])
        // Each connection's events reach the holders of its subscription only.
        try first.receive(text: Harness.event("0xs1", 1))
        try second.receive(text: Harness.event("0xs2", 2))
        #expect(h.events(a) == [1] && h.events(b) == [2] && h.events(c) == [2])
        #expect(h.bridge.pool.status.connections?.count == 2, "\(String(describing: h.bridge.pool.status.connections))")
    }

    /// A renewal with a protocol: the new connection restores the subscription under its own
    /// upstream id, and both connections deliver the same events, each naming its own
    /// subscription. The layer reads each as the app sees it (its ids mapped back), and the
    /// link's one overlap admits it once: the app gets every event once, in order, across the
    /// takeover.
    @Test func aRenewalDeliversEachEventOnceAsTheAppSeesItThoughEachConnectionNamesItsOwn() throws {
        let h = try Harness(protocol: "jsonrpc")
        let old = h.open()
        let a = try h.client()
        try h.send(a, #"{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}"#)
        let heads = try #require(try Harness.upstream(old).first?["id"])
        try old.receive(text: #"{"jsonrpc":"2.0","id":\#(heads.serialized),"result":"0xs1"}"#)
        #expect(h.answers(a) == [[1, "0xs1"]])
        try old.receive(text: Harness.event("0xs1", 1))
        #expect(h.events(a) == [1])
        h.bridge.link.renew(why: "the test")
        h.loop.run()
        #expect(h.dialer.all.count == 2)
        let new = h.dialer.last
        new.upgraded()
        h.loop.run()
        // The subscription restored on the new connection: its own upstream id and answer.
        let restored = try #require(try Harness.upstream(new).first { $0["method"] == "eth_subscribe" }?["id"])
        try new.receive(text: #"{"jsonrpc":"2.0","id":\#(restored.serialized),"result":"0xt1"}"#)
        #expect(h.messages(a).isEmpty, "the restore's answer is the daemon's own")
        try old.receive(text: Harness.event("0xs1", 2))
        try old.receive(text: Harness.event("0xs1", 3))
        // 2 on the new connection, under its own id: the same event as the app sees it (dropped),
        // and it has caught up: it takes over.
        try new.receive(text: Harness.event("0xt1", 2))
        #expect(h.bridge.link.renewalStatus?.renewals == 1)
        try new.receive(text: Harness.event("0xt1", 3))
        try new.receive(text: Harness.event("0xt1", 4))
        try old.receive(text: Harness.event("0xs1", 4))
        #expect(h.events(a) == [2, 3, 4])
        // 2 and 3 of the new connection the old one had delivered; the old one's 4 after the
        // takeover answers no app waiting on it: its session drops it.
        #expect(h.bridge.link.renewalStatus?.duplicatesDropped == 2)
        // The old connection closes, renewed.
        let close = try #require(try old.written().first { $0.opcode == .connectionClose })
        var data = close.data
        #expect(data.readInteger(as: UInt16.self) == 1000)
    }
}
