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
            self.bridge.fanout.upstreamLink(
                self.bridge.link, emitted: .message(UpstreamMessage(kind: .text, data: ByteBuffer(string: text), receivedAtMillis: 0)))
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
        var timedOut = false
        _ = pending.pending.wait(PendingRequests.Entry(client: client, id: "r", match: Filter(field: "re", equals: 1)), timeout: .seconds(5)) { _ in
            timedOut = true
        }
        #expect(pending.pending.count(of: client) == 1)
        h.upstream(#"{"re":2}"#)
        #expect(pending.pending.count == 1)
        h.upstream(#"{"re":1,"v":"x"}"#)
        h.upstream(#"{"re":1,"v":"y"}"#)
        let replies = h.lines(c).filter { $0["type"] == "reply" && $0["id"] == "r" }
        #expect(replies.count == 1, "\(replies)")
        #expect(replies.first?.value(at: "result.json.v") == "x")
        #expect(replies.first?.value(at: "result.seq") == 2)
        #expect(pending.pending.count == 0 && pending.pending.count(of: client) == 0)
        h.loop.advanceTime(by: .seconds(10))
        #expect(!timedOut, "the answered request's timeout still fired")
    }

    @Test func aClientThatGoesAwayTakesItsWaitingRequestsWithIt() throws {
        let h = Harness()
        let (c, client) = try h.client()
        _ = h.bridge.fanout.pending.wait(PendingRequests.Entry(client: client, id: 1, match: Filter(field: "x", equals: nil)), timeout: .seconds(5)) { _ in }
        try c.close().wait()
        h.loop.run()
        #expect(h.bridge.fanout.pending.count == 0)
        #expect(h.bridge.fanout.clientCount == 0)
    }

    /// The one request registry: a request with `match` and one answered by its protocol id
    /// count together against the limits; a partial answer replies once, the final one ends it;
    /// a client that goes takes both kinds with it, and no timer of theirs fires.
    @Test func requestsOfBothKindsCountTogetherAndGoWithTheirClient() throws {
        let h = Harness()
        let (c, client) = try h.client()
        let requests = h.bridge.fanout.pending
        var expired = 0
        _ = requests.wait(PendingRequests.Entry(client: client, id: 1, match: Filter(field: "x", equals: nil)), timeout: .seconds(5)) { _ in
            expired += 1
        }
        requests.waitForAnswer(client, key: "7", id: "q", timeout: .seconds(5)) { expired += 1 }
        #expect(requests.count(of: client) == 2 && requests.count == 2 && requests.matchedCount == 1 && requests.hasByID)
        #expect(requests.isWaiting(client, "7") && !requests.isWaiting(client, "8"))
        guard case .reply(let to) = requests.answer(client, key: "7", final: false) else {
            Issue.record("the first answer did not reply")
            return
        }
        #expect(to == "q")
        guard case .answeredAlready = requests.answer(client, key: "7", final: false) else {
            Issue.record("a second partial answer replied again")
            return
        }
        guard case .answeredAlready = requests.answer(client, key: "7", final: true) else {
            Issue.record("the final answer after a partial one replied again")
            return
        }
        #expect(!requests.isWaiting(client, "7") && requests.count == 1)
        guard case .none = requests.answer(client, key: "7", final: true) else {
            Issue.record("an ended request was answered")
            return
        }
        requests.waitForAnswer(client, key: "8", id: "r", timeout: .seconds(5)) { expired += 1 }
        #expect(requests.count(of: client) == 2)
        try c.close().wait()
        h.loop.run()
        #expect(requests.count == 0 && !requests.hasByID && !requests.hasMatched)
        h.loop.advanceTime(by: .seconds(10))
        #expect(expired == 0, "a gone client's request timed out")
    }

    // MARK: - Fan-out by read

    /// Messages published, as the link hands them over within one socket read (no loop turn).
    static func publish(_ h: Harness, _ texts: [String]) {
        for text in texts {
            h.bridge.fanout.upstreamLink(h.bridge.link, emitted: .message(UpstreamMessage(kind: .text, data: ByteBuffer(string: text), receivedAtMillis: 0)))
        }
    }

    /// The buffers written to `channel` since the last read of it.
    static func writes(_ channel: EmbeddedChannel) -> [ByteBuffer] {
        var out: [ByteBuffer] = []
        while let buffer = try? channel.readOutbound(as: ByteBuffer.self) { out.append(buffer) }
        return out
    }

    @Test func theLinesOfOneReadGoToEveryCaughtUpSubscriberAsOneSharedWrite() throws {
        let h = Harness()
        let (a, _) = try h.client()
        let (b, _) = try h.client()
        Self.publish(h, ["m1", "m2", "m3"])
        // Nothing goes out before the read is done.
        #expect(Self.writes(a).isEmpty && Self.writes(b).isEmpty)
        h.bridge.fanout.upstreamLinkReadComplete(h.bridge.link)
        let wa = Self.writes(a)
        let wb = Self.writes(b)
        #expect(wa.count == 1 && wb.count == 1, "\(wa.count) and \(wb.count) writes")
        #expect(
            Self.messages(wa.flatMap { String(buffer: $0).split(separator: "\n").map { (try? JSONValue.parse(String($0))) ?? .null } }) == ["m1", "m2", "m3"])
        // The same bytes for both: one buffer, not a copy each.
        let pa = wa.first?.withUnsafeReadableBytes { Int(bitPattern: $0.baseAddress) }
        let pb = wb.first?.withUnsafeReadableBytes { Int(bitPattern: $0.baseAddress) }
        #expect(pa != nil && pa == pb)
    }

    @Test func aStateLineOrANewClientFlushesTheReadsLinesFirst() throws {
        let h = Harness()
        let (a, _) = try h.client()
        Self.publish(h, ["m1", "m2"])
        h.bridge.fanout.upstreamLink(h.bridge.link, emitted: .state(.connecting, reason: "test"))
        // A client that connects now counts from seq 2: it never sees m1 or m2.
        let (late, _) = try h.client()
        Self.publish(h, ["m3"])
        let lines = h.lines(a)
        #expect(lines.map { $0["type"]?.stringValue ?? "?" } == ["message", "message", "state", "message"])
        #expect(Self.messages(lines) == ["m1", "m2", "m3"])
        #expect(Self.messages(h.lines(late)) == ["m3"])
    }

    @Test func aSubscriberThatIsBehindGetsTheLinesInItsQueueInOrder() throws {
        let h = Harness()
        let (a, _) = try h.client()
        // Not writable: the read's lines wait in the client's bounded queue.
        a.isWritable = false
        Self.publish(h, ["m1", "m2"])
        h.bridge.fanout.upstreamLinkReadComplete(h.bridge.link)
        Self.publish(h, ["m3"])
        h.bridge.fanout.upstreamLinkReadComplete(h.bridge.link)
        #expect(Self.writes(a).isEmpty)
        a.isWritable = true
        a.pipeline.fireChannelWritabilityChanged()
        #expect(Self.messages(h.lines(a)) == ["m1", "m2", "m3"])
    }

    /// A drain's batch is the size of what was queued, not of the 64 KiB it may hold: small
    /// batches waiting in NIO for a slow reader must not keep 64 KiB each.
    @Test func aDrainedBatchIsTheSizeOfItsLines() throws {
        let h = Harness()
        let (a, _) = try h.client()
        a.isWritable = false
        Self.publish(h, ["m1", "m2", "m3"])
        h.bridge.fanout.upstreamLinkReadComplete(h.bridge.link)
        a.isWritable = true
        a.pipeline.fireChannelWritabilityChanged()
        let writes = Self.writes(a)
        #expect(writes.count == 1)
        #expect(writes.allSatisfy { $0.capacity <= 2 * $0.readableBytes + 256 }, "\(writes.map { ($0.readableBytes, $0.capacity) })")
    }

    /// A subscriber that is behind queues each read's lines as one entry, and is written them
    /// as slices of the buffer every subscriber shares, whole lines of at most 64 KiB each; the
    /// few lines of small reads go out copied together in one write.
    @Test func aBehindSubscriberIsWrittenSlicesOfTheSharedBufferAndSmallReadsTogether() throws {
        let h = Harness()
        let (a, _) = try h.client()
        let (b, _) = try h.client()
        a.isWritable = false
        let big = (1...1000).map { "big \($0) " + String(repeating: "x", count: 200) }
        Self.publish(h, big)
        h.bridge.fanout.upstreamLinkReadComplete(h.bridge.link)
        for small in ["s1", "s2", "s3"] {
            Self.publish(h, [small])
            h.bridge.fanout.upstreamLinkReadComplete(h.bridge.link)
        }
        let shared = try #require(Self.writes(b).first)
        #expect(shared.readableBytes > 4 * 64 * 1024)
        a.isWritable = true
        a.pipeline.fireChannelWritabilityChanged()
        let writes = Self.writes(a)
        let lines = writes.flatMap { String(buffer: $0).split(separator: "\n").map { (try? JSONValue.parse(String($0))) ?? .null } }
        #expect(Self.messages(lines) == big + ["s1", "s2", "s3"])
        #expect(writes.allSatisfy { $0.readableBytes <= 64 * 1024 && $0.readableBytes > 0 && $0.getInteger(at: $0.writerIndex - 1, as: UInt8.self) == 0x0A })
        // The big read's parts are the shared buffer's bytes, not copies.
        let base = shared.withUnsafeReadableBytes { Int(bitPattern: $0.baseAddress) }
        let inShared = writes.filter { w in
            let p = w.withUnsafeReadableBytes { Int(bitPattern: $0.baseAddress) }
            return p >= base && p + w.readableBytes <= base + shared.readableBytes
        }
        #expect(inShared.count >= 4, "\(inShared.count) of \(writes.count) writes are slices of the shared buffer")
        // The three small reads: one write, with the big read's last part if it was small.
        #expect(
            Self.messages(String(buffer: writes.last!).split(separator: "\n").map { (try? JSONValue.parse(String($0))) ?? .null }).suffix(3) == [
                "s1", "s2", "s3",
            ])
        #expect(writes.count <= inShared.count + 1)
    }

    /// A flush buffer's start (rounded up to a power of 2, as NIO does) holds a flush of the
    /// last one's size, and is never more than half unused by it, which would have `flush` copy
    /// a steady feed's every buffer; up to 1 MiB, a quarter to spare where that allows.
    @Test func aFlushBufferStartsWithRoomAndIsNotCopiedForASteadyFeed() {
        var withHeadroom = 0
        for last in Array(1...5000) + [52_429, 60_000, 65_535, 65_536, 67_000, 100_000, 900_000] {
            let start = Fanout.startCapacity(after: last)
            let capacity = start <= 1 ? start : 1 << (Int.bitWidth - (start - 1).leadingZeroBitCount)
            #expect(capacity >= min(last, 1 << 20), "after \(last): \(capacity)")
            #expect(capacity <= max(2 * last, 1), "after \(last): \(capacity), a same-size flush would be copied")
            if capacity >= last + last / 4 { withHeadroom += 1 }
        }
        #expect(withHeadroom > 3000)
    }

    /// Routed lines (issue 46) wait in a batch per client until the read ends, as broadcast ones
    /// do: each client still gets its lines in the stream's order, broadcast and routed
    /// interleaved as numbered, and nobody another's.
    @Test func routedLinesKeepTheStreamsOrderAmongBroadcastOnes() throws {
        let h = Harness()
        let (a, ca) = try h.client()
        let (b, cb) = try h.client()
        let fanout = h.bridge.fanout
        func broadcast(_ text: String) { fanout.publish(UpstreamMessage(kind: .text, data: ByteBuffer(string: text), receivedAtMillis: 0)) }
        func route(_ text: String, to client: LocalClient) { fanout.deliver(nil, data: ByteBuffer(string: text), to: client, receivedAtMillis: 0) }
        // One read's messages, then its end.
        broadcast("b1")
        route("a2", to: ca)
        route("b3", to: cb)
        route("a4", to: ca)
        route("a5", to: ca)
        broadcast("b6")
        route("a7", to: ca)
        fanout.upstreamLinkReadComplete(h.bridge.link)
        let la = h.lines(a)
        let lb = h.lines(b)
        #expect(Self.messages(la) == ["b1", "a2", "a4", "a5", "b6", "a7"])
        #expect(la.compactMap { $0["seq"]?.intValue } == [1, 2, 4, 5, 6, 7])
        #expect(Self.messages(lb) == ["b1", "b3", "b6"])
        #expect(lb.compactMap { $0["seq"]?.intValue } == [1, 3, 6])
        // A routed message with no read end after it goes out on the loop's next turn.
        route("a8", to: ca)
        #expect(Self.messages(h.lines(a)) == ["a8"])
        // One message for several holders: one seq for all, taken after the broadcast lines
        // before it; a client holding it twice gets a seq of its own for its second copy.
        broadcast("b9")
        let shared = fanout.takeRoutedSeq()
        for client in [ca, cb, ca] { fanout.deliver(nil, data: ByteBuffer(string: "s10"), to: client, receivedAtMillis: 0, shared: shared) }
        fanout.upstreamLinkReadComplete(h.bridge.link)
        let sa = h.lines(a)
        let sb = h.lines(b)
        #expect(Self.messages(sa) == ["b9", "s10", "s10"] && sa.compactMap { $0["seq"]?.intValue } == [9, 10, 11])
        #expect(Self.messages(sb) == ["b9", "s10"] && sb.compactMap { $0["seq"]?.intValue } == [9, 10])
        // So too when its first copy went out before the second came (a fleet follower's
        // delivery between flushes what is pending).
        let again = fanout.takeRoutedSeq()
        fanout.deliver(nil, data: ByteBuffer(string: "s12"), to: ca, receivedAtMillis: 0, shared: again)
        fanout.flush()
        fanout.deliver(nil, data: ByteBuffer(string: "s12"), to: ca, receivedAtMillis: 0, shared: again)
        fanout.upstreamLinkReadComplete(h.bridge.link)
        #expect(h.lines(a).compactMap { $0["seq"]?.intValue } == [12, 13])
    }

    /// Messages routed to the same several holders one after another share one line per id
    /// (a run): each holder gets them in one batch, under its own id, in the stream's order
    /// among broadcast lines and lines routed to one client; the run ends when anything else is
    /// numbered. Holders that cannot share (one app twice, an app with no local client) make
    /// no run.
    @Test func aRunOfMessagesForTheSameHoldersKeepsEachClientsOrder() throws {
        let h = Harness()
        let (a, ca) = try h.client()
        let (b, cb) = try h.client()
        let (c, cc) = try h.client()
        let fanout = h.bridge.fanout
        func broadcast(_ text: String) { fanout.publish(UpstreamMessage(kind: .text, data: ByteBuffer(string: text), receivedAtMillis: 0)) }
        func route(_ text: String, to client: LocalClient) { fanout.deliver(nil, data: ByteBuffer(string: text), to: client, receivedAtMillis: 0) }
        // a and c know the subscription as "x", b as "y" (the layer writes each id's line).
        let x = WireID(.string("x"))
        let y = WireID(.string("y"))
        let holders = [ca, cb, cc].map { (client: LocalClient) in AppProtocolSessionHolder(app: client.id, appID: client === cb ? y : x) }
        // The message's first byte is its id, written as each holder knows it.
        func event(_ n: Int, for holders: [AppProtocolSessionHolder]) -> Bool {
            fanout.deliverInRun(
                holders, data: ByteBuffer(string: "?\(n)"), idAt: 0..<1, receivedAtMillis: 0, id: { $0.appID },
                spelling: { ByteBuffer(string: $0.json.stringValue ?? "!") })
        }
        broadcast("b1")
        #expect(event(2, for: holders) && event(3, for: holders))
        #expect(fanout.run.variants.count == 2 && fanout.run.variants.map(\.clients.count) == [2, 1])
        route("a4", to: ca)  // ends the run: queued before a4
        #expect(!fanout.run.isOpen)
        #expect(event(5, for: holders))  // sends a4's batch first
        broadcast("b6")
        #expect(event(7, for: holders) && event(8, for: holders) && fanout.run.seq == 7)
        // The same holders in another array (the session's changed, a holder added and gone): a
        // new run.
        var changed = holders
        changed.append(holders[0])
        changed.removeLast()
        #expect(event(9, for: changed) && fanout.run.seq == 9)
        fanout.upstreamLinkReadComplete(h.bridge.link)
        let la = h.lines(a)
        let lb = h.lines(b)
        let lc = h.lines(c)
        #expect(Self.messages(la) == ["b1", "x2", "x3", "a4", "x5", "b6", "x7", "x8", "x9"])
        #expect(Self.messages(lb) == ["b1", "y2", "y3", "y5", "b6", "y7", "y8", "y9"])
        #expect(Self.messages(lc) == ["b1", "x2", "x3", "x5", "b6", "x7", "x8", "x9"])
        #expect(la.compactMap { $0["seq"]?.intValue } == [1, 2, 3, 4, 5, 6, 7, 8, 9])
        #expect(lb.compactMap { $0["seq"]?.intValue } == [1, 2, 3, 5, 6, 7, 8, 9])
        // A run with no read end after it goes out on the loop's next turn.
        #expect(event(10, for: holders))
        #expect(Self.messages(h.lines(b)) == ["y10"])
        // One app twice, or an app that is not a local client: no run (each is sent its own).
        #expect(!event(11, for: holders + [AppProtocolSessionHolder(app: ca.id, appID: y)]))
        #expect(!event(11, for: holders + [AppProtocolSessionHolder(app: 9999, appID: x)]))
        #expect(!fanout.run.isOpen)
        _ = (h.lines(a), h.lines(c))
    }
}
