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
        let hello = Hello(state: "open", seq: 41, subscribed: true, write: false)
        try self.roundTrip(.hello(hello), hello.json)
        #expect(
            hello.json.serialized
                == #"{"type":"hello","protocol":1,"version":"\#(WSBridgeVersion.current)","state":"open","seq":41,"subscribed":true,"write":false}"#)

        let message = MessageLine(seq: UInt64.max, ts: 1_795_313_566_992, kind: .text, data: "{\"px\":1.5}")
        try self.roundTrip(.message(message), message.json)
        let inline = MessageLine(seq: 2, ts: 3, kind: .text, data: nil, inlineJSON: ["px": .number(JSONNumber("1234567890123456789")!)])
        try self.roundTrip(.message(inline), inline.json)

        let state = StateLine(state: "backingOff", reason: "server closed (code 1012)", ts: 5)
        try self.roundTrip(.state(state), state.json)
        let dropped = DroppedLine(count: 120, from: 2001, to: 2120)
        try self.roundTrip(.dropped(dropped), dropped.json)
        let gap = GapLine(from: 3, to: 5, reason: "no longer buffered")
        try self.roundTrip(.gap(gap), gap.json)

        let ok = ReplyLine.ok(id: 7, SendResult.queued(depth: 2, state: "connecting").json)
        try self.roundTrip(.reply(ok), ok.json)
        let failed = ReplyLine(id: "q", .failure(ProtocolError(.queueFull, "full", id: "q")))
        try self.roundTrip(.reply(failed), failed.json)
        #expect(failed.json == ProtocolError(.queueFull, "full", id: "q").reply)
    }

    @Test func unknownOrMalformedLinesAreNotGuessed() throws {
        #expect(ServerLine.decode(try JSONValue.parse(#"{"type":"future","x":1}"#)) == nil)
        #expect(ServerLine.decode(try JSONValue.parse(#"{"type":"message","seq":"one","kind":"text"}"#)) == nil)
        #expect(ServerLine.decode(try JSONValue.parse(#"{"type":"message","seq":1,"kind":"audio"}"#)) == nil)
        #expect(ServerLine.decode(try JSONValue.parse(#"{"type":"dropped","count":-1,"from":1,"to":2}"#)) == nil)
    }

    @Test func resultsRoundTrip() throws {
        let status = StatusReport(
            state: "open", since: 1, url: "wss://example.test/x", reconnects: 2, failedAttempts: 3, rttMillis: 1.25, subprotocol: "v1",
            compression: true, messagesIn: 4, bytesIn: 5, messagesOut: 6, bytesOut: 7, subscribers: 8, clients: 9, seq: 10, drops: 11,
            queue: .init(messages: 1, bytes: 2, maxMessages: 3, maxBytes: 4), lastError: "e",
            lastClose: .init(code: 1001, reason: "bye", by: "server"), retryInMillis: 12
        )
        #expect(StatusReport(json: try JSONValue.parse(status.json.serialized)) == status)
        let noClose = StatusReport(json: try JSONValue.parse(#"{"state":"idle","last_close":null,"rtt_ms":null}"#))
        #expect(noClose.lastClose == nil && noClose.rttMillis == nil && noClose.state == "idle")

        let subscribed = SubscribeResult(subscribed: true, seq: 4, filter: Filter(field: "a.b", equals: 1))
        #expect(SubscribeResult(json: try JSONValue.parse(subscribed.json.serialized)) == subscribed)
        #expect(SendResult(json: SendResult.sent.json) == .sent)
        #expect(LinkStateResult(json: LinkStateResult(state: "closing").json).state == "closing")
        let answer = RequestResult(seq: 9, payload: ["id": 42])
        #expect(RequestResult(json: answer.json) == answer)
    }
}
