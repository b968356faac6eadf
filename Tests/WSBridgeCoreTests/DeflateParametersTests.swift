import Testing
import WSBridgeCore

@Suite struct DeflateParametersTests {
    @Test func noAnswerMeansNoCompression() throws {
        #expect(try DeflateParameters.negotiate(response: nil, offered: true) == nil)
        #expect(try DeflateParameters.negotiate(response: "  ", offered: true) == nil)
    }

    @Test func plainAcceptance() throws {
        #expect(try DeflateParameters.negotiate(response: "permessage-deflate", offered: true) == DeflateParameters())
    }

    @Test func parametersAreRead() throws {
        let p = try DeflateParameters.negotiate(
            response: "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=10; client_max_window_bits=\"9\"",
            offered: true
        )
        var expected = DeflateParameters()
        expected.serverNoContextTakeover = true
        expected.clientNoContextTakeover = true
        expected.serverMaxWindowBits = 10
        expected.clientMaxWindowBits = 9
        #expect(p == expected)
    }

    @Test(arguments: [
        ("x-webkit-deflate-frame", true, "not offered"),
        ("permessage-deflate", false, "upstream.compression = false"),
        ("permessage-deflate, permessage-deflate", true, "twice"),
        ("permessage-deflate; server_max_window_bits=16", true, "8...15"),
        ("permessage-deflate; client_max_window_bits", true, "8...15"),
        ("permessage-deflate; mystery", true, "unknown permessage-deflate parameter"),
        ("permessage-deflate; server_no_context_takeover; server_no_context_takeover", true, "repeated"),
        ("permessage-deflate; server_no_context_takeover=1", true, "unknown"),
    ])
    func badAnswersAreRefused(_ response: String, _ offered: Bool, _ mentions: String) {
        #expect {
            _ = try DeflateParameters.negotiate(response: response, offered: offered)
        } throws: { error in
            "\(error)".contains(mentions)
        }
    }
}
