import NIOCore
import Testing
import WSBridgeProtocol

@testable import WSBridgeDaemon

/// The one-pass `send` reader (SendLine) against the full decoder: whatever it takes, it reads
/// as the decoder does (the same id, the same text, byte for byte); what it does not take goes to
/// the decoder, which says what is wrong.
@Suite struct SendLineTests {
    /// The full decoder's reading of `line`: the id and the text of a plain text send, or nil.
    static func decoded(_ line: String) -> (id: JSONValue?, text: [UInt8])? {
        guard case .success(let request)? = RequestDecoding.decode(.line(ByteBuffer(string: line)), limits: RequestLimits()),
            case .send(.text(let text), nil) = request.command
        else { return nil }
        return (request.id, Array(text.utf8))
    }

    static func scanned(_ line: String) -> (id: JSONValue?, text: [UInt8])? {
        SendLine.scan(ByteBuffer(string: line)).map { ($0.id, Array($0.text.readableBytesView)) }
    }

    @Test(arguments: [
        #"{"id":1,"op":"send","text":"{\"p\":\"BTC\",\"q\":1}"}"#,
        #"{"op":"send","text":"hello","id":"a-7"}"#,
        #"{ "text" : "tabs\tand\nnewlines\\ and \/ slashes" , "op" : "send" }"#,
        #"{"v":1,"id":-2.5e3,"op":"send","text":""}"#,
        #"{"id":12345678901234567890,"op":"send","text":"héllo ✓ 𝄞"}"#,
        "{\"id\":3,\"op\":\"send\",\"text\":\"x\"}\r\n ",
        #"{"id":4,"op":"send","text":"\b\f\r"}"#,
        #"{"id":0,"op":"send","text":"z"}"#,
        #"{"id":-0.5E+2,"op":"send","text":"z"}"#,
        // Long runs between escapes (copied whole), an escape first and last.
        #"{"id":5,"op":"send","text":"\""# + String(repeating: "x", count: 70) + #"\"\\"# + String(repeating: "é", count: 40) + #"\n"}"#,
    ])
    func takesTheCommonSendsAndReadsThemAsTheDecoderDoes(line: String) throws {
        let full = try #require(Self.decoded(line), "the decoder refuses \(line)")
        let fast = try #require(Self.scanned(line), "not taken: \(line)")
        #expect(fast.id == full.id && fast.text == full.text, "\(line): \(fast) vs \(full)")
    }

    @Test(arguments: [
        #"{"id":1,"op":"send","text":"\u00e9"}"#,  // \u: the decoder's
        #"{"id":1,"op":"send","text":"a","sticky":"k"}"#,  // another key
        #"{"id":1,"op":"send","binary":"aGk="}"#,
        #"{"id":1,"op":"status"}"#,
        #"{"id":1,"op":"send","text":"a","text":"b"}"#,  // a duplicate
        #"{"id":1,"id":2,"op":"send","text":"a"}"#,
        #"{"id":1,"op":"send","text":"a"} x"#,  // text after it
        #"{"id":1,"op":"send","text":"a""#,  // cut
        #"{"id":1,"op":"send","text":"a",}"#,
        #"{"id":[1],"op":"send","text":"a"}"#,
        #"{"id":01,"op":"send","text":"a"}"#,  // not JSON's numbers
        #"{"id":1.,"op":"send","text":"a"}"#,
        #"{"id":-,"op":"send","text":"a"}"#,
        #"{"id":1e,"op":"send","text":"a"}"#,
        #"{"id":+1,"op":"send","text":"a"}"#,
        #"{"id":.5,"op":"send","text":"a"}"#,
        #"{"id":1-2,"op":"send","text":"a"}"#,
        #"{"v":2,"op":"send","text":"a"}"#,
        #"{"op":"send"}"#,
        "{\"op\":\"send\",\"text\":\"a\u{01}b\"}",  // a raw control byte
        #"{"id":"\"q\"","op":"send","text":"a"}"#,  // an escaped id
        #"["op","send"]"#,
        "",
    ])
    func leavesTheRestToTheDecoder(line: String) {
        #expect(Self.scanned(line) == nil, "taken: \(line)")
    }
}
