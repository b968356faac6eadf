import Testing
import WSBridgeProtocol

/// Every daemon → client line is one type: what `json` writes, `ServerLine.decode` reads back.
@Suite struct ServerLineTests {
    func roundTrip(_ line: ServerLine, _ json: JSONValue) throws {
        let text = json.serialized
        let back = ServerLine.decode(try JSONValue.parse(text))
        #expect(back == line, "\(text)")
    }

    @Test func everyLineTypeRoundTrips() throws {
        let hello = Hello(commit: nil, state: .open, seq: 41, stream: "00000000deadbeef", subscribed: true, write: false)
        try self.roundTrip(.hello(hello), hello.json)
        #expect(
            hello.json.serialized
                == #"{"type":"hello","protocol":1,"version":"\#(WSBridgeVersion.current)","state":"open","seq":41,"stream":"00000000deadbeef","subscribed":true,"write":false}"#
        )
        let built = Hello(commit: "7f101b41ee15", state: .open, seq: 41, stream: "00000000deadbeef", subscribed: true, write: false)
        try self.roundTrip(.hello(built), built.json)
        #expect(built.json.serialized.contains(#""version":"\#(WSBridgeVersion.current)","commit":"7f101b41ee15","state""#))

        let message = MessageLine(seq: UInt64.max, ts: 1_795_313_566_992, kind: .text, data: "{\"px\":1.5}")
        try self.roundTrip(.message(message), message.json)
        let inline = MessageLine(seq: 2, ts: 3, kind: .text, data: nil, inlineJSON: ["px": .number(JSONNumber("1234567890123456789")!)])
        try self.roundTrip(.message(inline), inline.json)

        let state = StateLine(state: .backingOff, reason: "server closed (code 1012)", ts: 5)
        try self.roundTrip(.state(state), state.json)
        let dropped = DroppedLine(count: 120, from: 2001, to: 2120)
        try self.roundTrip(.dropped(dropped), dropped.json)
        let gap = GapLine(stream: "s1", reason: GapLine.notBuffered, from: 3, to: 5, next: 6, message: "no longer buffered")
        try self.roundTrip(.gap(gap), gap.json)
        #expect(gap.json.serialized == #"{"type":"gap","stream":"s1","reason":"not_buffered","from":3,"to":5,"next":6,"message":"no longer buffered"}"#)
        let restarted = GapLine(stream: "s2", reason: GapLine.restarted, next: 1, since: 729, message: "restarted")
        try self.roundTrip(.gap(restarted), restarted.json)
        #expect(restarted.json.serialized == #"{"type":"gap","stream":"s2","reason":"restarted","since":729,"next":1,"message":"restarted"}"#)
        let sticky = ReplyLine.ok(id: 8, SendResult.sticky(StickyResult(status: .held, key: "k", scope: .daemon, holders: 2, state: .open)).json)
        try self.roundTrip(.reply(sticky), sticky.json)
        if case .success(let result) = sticky.outcome {
            #expect(try SendResult(json: result) == .sticky(StickyResult(status: .held, key: "k", scope: .daemon, holders: 2, state: .open)))
        }
        let list = StickyListResult(keys: [
            .init(key: "k", bytes: 9, preview: "sub", onUnstick: true, since: 5, holders: [.init(scope: .client, pid: 42, uid: 1000, since: 6)])
        ])
        #expect(try StickyListResult(json: try JSONValue.parse(list.json.serialized)) == list)
        let unstick = UnstickResult(key: "k", holders: 0, leave: "sent")
        #expect(try UnstickResult(json: unstick.json) == unstick)

        let ok = ReplyLine.ok(id: 7, SendResult.queued(depth: 2, state: .connecting).json)
        try self.roundTrip(.reply(ok), ok.json)
        // What a queued send waits for goes as `waits`, and comes back; absent from an older daemon.
        let paced = SendResult.queued(depth: 3, state: .open, waits: .pace)
        #expect(paced.json["waits"] == "pace")
        #expect(try SendResult(json: paced.json) == paced)
        #expect(SendResult.queued(depth: 3, state: .open).json["waits"] == nil)
        let failed = ReplyLine(id: "q", .failure(ProtocolError(.queueFull, "full", id: "q")))
        try self.roundTrip(.reply(failed), failed.json)
        #expect(failed.json == ProtocolError(.queueFull, "full", id: "q").reply)
    }

    /// The send path's reply, cut from the schema's line once: the same bytes as encoding it,
    /// for every kind of id.
    @Test func aConstantReplyIsTheEncodedLine() throws {
        let constant = ReplyLine.Constant(result: SendResult.sent.json)
        // `.none`: a bare nil literal would be JSONValue's null.
        for id: JSONValue? in [.none, 7, "q\"1", 1.5, -3, "é"] {
            let line = String(decoding: constant.line(id: id), as: UTF8.self)
            #expect(line == ReplyLine.ok(id: id, SendResult.sent.json).json.serialized + "\n")
            let decoded = ServerLine.decode(try JSONValue.parse(String(line.dropLast())))
            #expect(decoded == .reply(ReplyLine.ok(id: id, SendResult.sent.json)), "\(line)")
        }
    }

    @Test func unknownOrMalformedLinesAreNotGuessed() throws {
        #expect(ServerLine.decode(try JSONValue.parse(#"{"type":"future","x":1}"#)) == nil)
        #expect(ServerLine.decode(try JSONValue.parse(#"{"type":"message","seq":"one","kind":"text"}"#)) == nil)
        #expect(ServerLine.decode(try JSONValue.parse(#"{"type":"message","seq":1,"kind":"audio"}"#)) == nil)
        #expect(ServerLine.decode(try JSONValue.parse(#"{"type":"dropped","count":-1,"from":1,"to":2}"#)) == nil)
    }

    @Test func resultsRoundTrip() throws {
        var status = StatusReport()
        (status.state, status.since, status.url, status.reconnects, status.failedAttempts, status.rttMs, status.subprotocol) = (
            .open, 1, "wss://example.test/x", 2, 3, 1.25, "v1"
        )
        (status.compression, status.traffic.messagesIn, status.traffic.bytesIn, status.traffic.messagesOut, status.traffic.bytesOut) = (true, 4, 5, 6, 7)
        (status.subscribers, status.clients, status.seq, status.drops) = (8, 9, 10, 11)
        status.queue = .init(messages: 1, bytes: 2, maxMessages: 3, maxBytes: 4)
        (status.lastError, status.lastClose, status.retryInMs) = ("e", .init(code: 1001, reason: "bye", by: .server), 12)
        #expect(try StatusReport(json: try JSONValue.parse(status.json.serialized)) == status)
        var withSession = status
        withSession.stream = "0123456789abcdef"
        withSession.session = .init(openingMessages: 2, readyWhen: "type=\"authed\"", ready: "waiting", stickyKeys: 3, stickyBytes: 40)
        withSession.lastErrorReason = "not_ready"
        #expect(try StatusReport(json: try JSONValue.parse(withSession.json.serialized)) == withSession)
        let noClose = try StatusReport(json: try JSONValue.parse(#"{"state":"idle","last_close":null,"rtt_ms":null}"#))
        #expect(noClose.lastClose == nil && noClose.rttMs == nil && noClose.state == .idle)

        let subscribed = SubscribeResult(subscribed: true, seq: 4, filter: Filter(field: "a.b", equals: 1))
        #expect(try SubscribeResult(json: try JSONValue.parse(subscribed.json.serialized)) == subscribed)
        #expect(try SendResult(json: SendResult.sent.json) == .sent)
        #expect(try LinkStateResult(json: LinkStateResult(state: .closing).json).state == .closing)
        let answer = RequestResult(seq: 9, payload: ["id": 42])
        #expect(try RequestResult(json: answer.json) == answer)
    }
}
