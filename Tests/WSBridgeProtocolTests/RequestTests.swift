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
        #expect(try self.decode(#"{"op":"subscribe"}"#).command == .subscribe(filter: nil, since: nil))
        #expect(
            try self.decode(#"{"op":"subscribe","filter":{"field":"data.sym","equals":"X"},"since":12}"#).command
                == .subscribe(filter: Filter(field: "data.sym", equals: "X"), since: 12)
        )
        #expect(try self.decode(#"{"op":"unsubscribe","id":"a"}"#) == Request(id: "a", command: .unsubscribe))
        #expect(try self.decode(#"{"op":"send","text":"hi"}"#).command == .send(.text("hi")))
        #expect(try self.decode(#"{"op":"send","binary":"AAEC"}"#).command == .send(.binary([0, 1, 2])))
        #expect(try self.decode(#"{"op":"close"}"#).command == .close(code: 1000, reason: ""))
        #expect(try self.decode(#"{"op":"close","code":4001,"reason":"bye"}"#).command == .close(code: 4001, reason: "bye"))
        #expect(try self.decode(#"{"op":"connect"}"#).command == .connect)
        #expect(try self.decode(#"{"op":"reconnect","v":1}"#).command == .reconnect)
        #expect(
            try self.decode(#"{"op":"request","text":"q","match":{"field":"id","equals":7},"timeout":2.5}"#).command
                == .request(.text("q"), match: Filter(field: "id", equals: 7), timeout: .milliseconds(2500))
        )
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
        (#"{"op":"request","text":"q"}"#, .missingField, "missing \"match\""),
        (#"{"op":"request","text":"q","match":{"field":"id"},"timeout":0}"#, .invalidValue, "between 0 and 3600"),
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
    }
}
