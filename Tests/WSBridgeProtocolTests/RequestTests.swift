import Testing
import WSBridgeProtocol

@Suite struct RequestTests {
    func decode(_ line: String) throws -> Request {
        try Request.decode(try JSONValue.parse(line))
    }

    func error(_ line: String) -> ProtocolError? {
        do {
            _ = try Request.decode(try JSONValue.parse(line))
            return nil
        } catch let e as ProtocolError {
            return e
        } catch {
            return nil
        }
    }

    @Test func everyOpDecodes() throws {
        #expect(try self.decode(#"{"op":"status","id":1}"#) == Request(id: 1, command: .status))
        #expect(try self.decode(#"{"op":"subscribe"}"#).command == .subscribe(filter: nil, since: nil, stream: nil))
        #expect(
            try self.decode(#"{"op":"subscribe","filter":{"field":"data.sym","equals":"X"},"since":12}"#).command
                == .subscribe(filter: Filter(field: "data.sym", equals: "X"), since: 12, stream: nil)
        )
        #expect(try self.decode(#"{"op":"unsubscribe","id":"a"}"#) == Request(id: "a", command: .unsubscribe))
        #expect(try self.decode(#"{"op":"send","text":"hi"}"#).command == .send(.text("hi"), sticky: nil))
        #expect(try self.decode(#"{"op":"send","binary":"AAEC"}"#).command == .send(.binary([0, 1, 2]), sticky: nil))
        #expect(
            try self.decode(#"{"op":"subscribe","since":7,"stream":"00ab"}"#).command == .subscribe(filter: nil, since: 7, stream: "00ab"))
        #expect(
            try self.decode(#"{"op":"send","text":"sub","sticky":"t","scope":"daemon","on_unstick":"unsub"}"#).command
                == .send(.text("sub"), sticky: StickyOptions(key: "t", scope: .daemon, onUnstick: "unsub")))
        #expect(try self.decode(#"{"op":"send","text":"sub","sticky":"t"}"#).command == .send(.text("sub"), sticky: StickyOptions(key: "t")))
        #expect(try self.decode(#"{"op":"sticky"}"#).command == .sticky)
        #expect(try self.decode(#"{"op":"unstick","key":"t"}"#).command == .unstick(key: "t", text: nil, scope: nil))
        #expect(
            try self.decode(#"{"op":"unstick","key":"t","text":"bye","scope":"daemon"}"#).command == .unstick(key: "t", text: "bye", scope: .daemon))
        #expect(try self.decode(#"{"op":"close"}"#).command == .close(code: 1000, reason: ""))
        #expect(try self.decode(#"{"op":"close","code":4001,"reason":"bye"}"#).command == .close(code: 4001, reason: "bye"))
        #expect(try self.decode(#"{"op":"connect"}"#).command == .connect)
        #expect(try self.decode(#"{"op":"reconnect","v":1}"#).command == .reconnect)
        #expect(
            try self.decode(#"{"op":"request","text":"q","match":{"field":"id","equals":7},"timeout":2.5}"#).command
                == .request(.text("q"), match: Filter(field: "id", equals: 7), timeout: .milliseconds(2500))
        )
        // Without match: the application protocol's id says what answers (the daemon refuses it for raw).
        #expect(
            try self.decode(#"{"op":"request","text":"q"}"#).command == .request(.text("q"), match: nil, timeout: .seconds(10))
        )
    }

    /// What the CLI writes (`Request.json`) is what the daemon reads back, for every op.
    @Test func everyCommandEncodesToWhatDecodesToIt() throws {
        let commands: [Command] = [
            .subscribe(filter: nil, since: nil, stream: nil), .subscribe(filter: Filter(field: "data.sym", equals: "X"), since: 12, stream: "00ab"),
            .subscribe(filter: Filter(.prefix("42[")), since: nil, stream: nil), .subscribe(filter: nil, since: nil, stream: nil, all: true),
            .unsubscribe, .send(.text("hi"), sticky: nil), .send(.binary([0, 1, 2, 255]), sticky: nil),
            .send(.text("sub"), sticky: StickyOptions(key: "t", scope: .daemon, onUnstick: "unsub")), .sticky, .clearSetAside,
            .unstick(key: "t", text: nil, scope: nil), .unstick(key: "t", text: "bye", scope: .daemon), .status, .clients, .metrics,
            .close(code: 4001, reason: "bye"), .connect, .reconnect,
            .request(.text("q"), match: Filter(field: "id", equals: 7), timeout: .milliseconds(2500)),
            .request(.text("q"), match: nil, timeout: .seconds(10)),
        ]
        #expect(Set(commands.map(\.op)) == Set(Op.allCases))
        for command in commands {
            let request = Request(id: "c", command: command)
            let line = request.json.serialized
            #expect(try self.decode(line) == request, "\(line)")
        }
        #expect(Request(id: nil, command: .status).json.serialized == #"{"op":"status","v":1}"#)
    }

    @Test(arguments: [
        (#"[1]"#, ErrorCode.notAnObject, "must be a JSON object"),
        (#"{"id":1}"#, .missingField, "missing \"op\""),
        (#"{"op":5}"#, .wrongType, "\"op\" must be a string"),
        (#"{"op":"fly"}"#, .unknownOp, "unknown op \"fly\": use one of subscribe"),
        (#"{"op":"status","v":2}"#, .badVersion, "speaks version 1"),
        (#"{"op":"send"}"#, .missingField, "needs \"text\""),
        (#"{"op":"send","text":1}"#, .wrongType, "\"text\" must be a string"),
        (#"{"op":"send","text":"a","binary":"AA=="}"#, .invalidValue, "not both"),
        (#"{"op":"send","binary":"!!"}"#, .invalidValue, "not valid base64"),
        (#"{"op":"subscribe","since":-1}"#, .wrongType, "whole number >= 0"),
        (#"{"op":"subscribe","filter":"type"}"#, .wrongType, "must be an object"),
        (#"{"op":"subscribe","filter":{}}"#, .missingField, "needs \"field\""),
        (#"{"op":"close","code":1006}"#, .invalidValue, "3000-4999"),
        (#"{"op":"close","reason":5}"#, .wrongType, "must be a string"),
        (#"{"op":"request","text":"q","match":{"field":"id"},"timeout":0}"#, .invalidValue, "more than 0 and at most 3600 seconds, got 0"),
        (#"{"op":"status","id":[1]}"#, .wrongType, "\"id\" must be a string or a number"),
    ])
    func invalidRequestsSayWhatToFix(_ line: String, _ code: ErrorCode, _ mentions: String) {
        let e = self.error(line)
        #expect(e?.code == code, "\(e.map { "\($0)" } ?? "no error")")
        #expect(e?.message.contains(mentions) == true, "\(e?.message ?? "")")
    }

    @Test func errorRepliesCarryTheId() {
        let e = self.error(#"{"op":"fly","id":"q1"}"#)
        #expect(e?.reply["id"] == "q1")
        #expect(e?.reply["ok"] == false)
        #expect(e?.reply.value(at: "error.code") == "unknown_op")
    }

    @Test func closeReasonIsBounded() {
        let long = String(repeating: "x", count: 124)
        #expect(self.error(#"{"op":"close","reason":"\#(long)"}"#)?.code == .invalidValue)
    }

    @Test func filterMatching() throws {
        let msg = try JSONValue.parse(#"{"type":"trade","data":{"sym":"X","px":1.5},"items":[{"id":3}]}"#)
        #expect(Filter(field: "type", equals: "trade").matches(msg))
        #expect(!Filter(field: "type", equals: "quote").matches(msg))
        #expect(Filter(field: "data.px", equals: 1.5).matches(msg))
        #expect(Filter(field: "items.0.id", equals: 3).matches(msg))
        #expect(Filter(field: "data.sym", equals: nil).matches(msg))
        #expect(!Filter(field: "data.missing", equals: nil).matches(msg))
        #expect(!Filter(field: "items.x.id", equals: nil).matches(msg))
        #expect(!Filter(field: "type.deeper", equals: nil).matches(msg))
    }

    @Test func filterPathsAreSplitOnceAndBounded() throws {
        #expect(Filter(field: "a.0.b", equals: nil).path == [.init("a"), .init("0"), .init("b")])
        #expect(Filter(field: "a.0.b", equals: nil).path[1].index == 0)
        let limits = RequestLimits(filterMaxBytes: 16, filterMaxDepth: 3)
        let ok = try Request.decode(JSONValue.parse(#"{"op":"subscribe","filter":{"field":"a.b.c"}}"#), limits: limits)
        #expect(ok.command == .subscribe(filter: Filter(field: "a.b.c", equals: nil), since: nil, stream: nil))
        for (line, mentions) in [
            (#"{"op":"subscribe","filter":{"field":"a.b.c.d"}}"#, "at most 3 (local.filter_max_depth)"),
            (#"{"op":"subscribe","filter":{"field":"abcdefghijklmnopq"}}"#, "at most 16 bytes (local.filter_max_bytes)"),
            (#"{"op":"request","text":"q","match":{"field":"........"}}"#, "9 parts"),
        ] {
            do {
                _ = try Request.decode(JSONValue.parse(line), limits: limits)
                Issue.record("expected an error for \(line)")
            } catch let error as ProtocolError {
                #expect(error.code == .invalidValue)
                #expect(error.message.contains(mentions), "\(error.message)")
            }
        }
    }
}
