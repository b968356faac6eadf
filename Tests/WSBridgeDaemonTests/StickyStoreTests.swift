import NIOCore
import Testing
import WSBridgeCore
import WSBridgeProtocol

@testable import WSBridgeDaemon

/// The daemon-scope sticky keys' file: its exact text, read back whole, and what is refused.
@Suite struct StickyStoreTests {
    @Test func keysRoundTripWithTheFileTextAsWritten() throws {
        let entries: [StickyRegistry.Entry] = [
            .restored(key: "auth", payload: .text(#"{"op":"auth"}"#), onUnstick: "bye", pid: 42, uid: 1000, sinceMillis: 7),
            .restored(key: "raw", payload: .binary([0, 1, 255]), onUnstick: nil, pid: nil, uid: nil, sinceMillis: 8),
        ]
        let file = String(buffer: StickyStore.encode(entries))
        #expect(
            file
                == #"{"version":1,"keys":[{"key":"auth","text":"{\"op\":\"auth\"}","on_unstick":"bye","pid":42,"uid":1000,"since":7},{"key":"raw","binary":"AAH/","since":8}]}"#
                + "\n")
        #expect(try StickyStore.decode(Array(file.utf8)) == entries)
    }

    @Test func aFileWithoutTextOrKeyOrOfAnotherVersionIsRefused() {
        for (text, problem) in [
            (#"{"version":2,"keys":[]}"#, "not version 1"), (#"{"version":1,"keys":[{"key":"k","since":1}]}"#, "neither text nor binary"),
            (#"{"version":1,"keys":[{"text":"x","since":1}]}"#, "a key without"), (#"{"version":1,"keys":[{"key":"k","text":3}]}"#, "keys.0.text"),
        ] {
            #expect(throws: (any Error).self, "\(text)") { try StickyStore.decode(Array(text.utf8)) }
            do {
                _ = try StickyStore.decode(Array(text.utf8))
            } catch {
                #expect("\(error)".contains(problem), "\(text): \(error)")
            }
        }
    }
}
