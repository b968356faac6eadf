import Testing
import WSBridgeProtocol

@testable import WSBridgeCore

/// A JSON value from test text (a mistake in it stops the run, naming the text).
func json(_ text: String) -> JSONValue {
    do { return try JSONValue.parse(text) } catch { fatalError("bad test JSON \(text): \(error)") }
}

/// The session with each codec, as the tests name it.
typealias GraphQL = AppProtocolSession
typealias RPC = AppProtocolSession
