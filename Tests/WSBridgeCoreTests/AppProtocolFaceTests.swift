import Testing
import WSBridgeProtocol

@testable import WSBridgeCore

/// What an app's own library expects of the WebSocket face (`AppProtocolFace`), and JSON-RPC
/// batches (`AppProtocolBatches`), on either face.
@Suite struct AppProtocolFaceTests {
    static func face(_ kind: Configuration.ApplicationProtocol.Kind, namespace: String? = nil) -> AppProtocolFace {
        var settings = Configuration.ApplicationProtocol()
        settings.kind = kind
        settings.namespace = namespace
        return AppProtocolFace(settings)
    }

    @Test func eachProtocolGetsTheSubprotocolItsLibraryAsksFor() {
        #expect(Self.face(.graphqlTransportWS).subprotocol(offered: ["graphql-transport-ws"]) == "graphql-transport-ws")
        // The old subscriptions-transport-ws is another protocol: not agreed to.
        #expect(Self.face(.graphqlTransportWS).subprotocol(offered: ["graphql-ws"]) == nil)
        #expect(Self.face(.stomp).subprotocol(offered: ["v10.stomp", "v12.stomp"]) == "v12.stomp")
        #expect(Self.face(.jsonrpc).subprotocol(offered: ["anything"]) == nil)
    }

    @Test func socketIOGetsItsOwnEngineIOSessionPingsAndNamespace() throws {
        let face = Self.face(.socketio)
        #expect(face.libraryPaths == ["/socket.io/"])
        #expect(face.refusal(query: "EIO=4&transport=websocket") == nil)
        #expect(face.refusal(query: "EIO=3&transport=websocket")?.contains("Engine.IO 4") == true)
        #expect(face.refusal(query: "EIO=4&transport=polling")?.contains("transports: [\"websocket\"]") == true)
        let greeting = try #require(face.greeting(sid: "s1", maxPayload: 1000, clientID: 1))
        #expect(greeting.hasPrefix("0"))
        let open = try JSONValue.parse(Array(greeting.utf8.dropFirst())[...])
        #expect(open["sid"] == "s1" && open["upgrades"] == .array([]) && open["pingInterval"] == 25000 && open["pingTimeout"] == 20000)
        #expect(face.ping?.text == "2" && face.ping?.every == .seconds(25))
        #expect(face.handling(of: ["type": "pong"], sid: "s1") == .pong)
        #expect(face.handling(of: ["type": "connect", "namespace": "/"], sid: "s1") == .answer(#"40{"sid":"s1-io"}"#))
        #expect(face.handling(of: ["type": "event", "namespace": "/", "event": "e", "args": []], sid: "s1") == .layer)
        let chat = Self.face(.socketio, namespace: "/chat")
        #expect(chat.handling(of: ["type": "connect", "namespace": "/chat"], sid: "s") == .answer(#"40/chat,{"sid":"s-io"}"#))
        guard case .answer(let refused) = chat.handling(of: ["type": "connect", "namespace": "/"], sid: "s") else { return #expect(Bool(false)) }
        #expect(refused.hasPrefix("44{") && refused.contains("namespace /chat only"))
    }

    @Test func natsGetsInfoFirstInBinaryFramesAndOKOnlyWhenVerbose() throws {
        let face = Self.face(.nats)
        #expect(face.binaryFrames && !Self.face(.stomp).binaryFrames)
        let info = try #require(face.greeting(sid: "s", maxPayload: 4096, clientID: 7))
        #expect(info.hasPrefix("INFO {") && info.hasSuffix("}\r\n") && info.contains(#""max_payload":4096"#) && info.contains(#""headers":true"#))
        #expect(face.handling(of: ["op": "CONNECT", "options": ["verbose": false]], sid: "s") == .swallow)
        #expect(face.handling(of: ["op": "CONNECT", "options": ["verbose": true]], sid: "s") == .answer("+OK\r\n"))
        #expect(face.handling(of: ["op": "PING"], sid: "s") == .layer)
        #expect(Self.face(.jsonrpc).greeting(sid: "s", maxPayload: 1, clientID: 1) == nil)
    }

    // MARK: - Batches

    @Test func aBatchsAnswersComeAsOneArrayInTheOrderOfItsCalls() {
        var batches = AppProtocolBatches()
        let items: [JSONValue] = [
            ["jsonrpc": "2.0", "id": 1, "method": "a"], ["jsonrpc": "2.0", "method": "note"], ["jsonrpc": "2.0", "id": "x", "method": "b"], 7,
        ]
        #expect(AppProtocolBatches.slots(items) == [0, nil, 1, 2])
        let number = batches.open(5, items: items)
        #expect(number != nil && !batches.isEmpty)
        // Another app's answer, and a notification, are not the batch's.
        #expect(batches.take(["jsonrpc": "2.0", "id": 1, "result": 0], for: 6) == .notBatched)
        #expect(batches.take(["jsonrpc": "2.0", "method": "eth_subscription", "params": [:]], for: 5) == .notBatched)
        #expect(batches.take(["jsonrpc": "2.0", "id": "x", "result": "B"], for: 5) == .held)
        let refused = AppProtocolBatches.refusal(of: 7, "not a request")
        #expect(batches.fill(5, batch: number!, slot: 2, with: refused) == .held)
        let done = batches.take(["jsonrpc": "2.0", "id": 1, "result": "A"], for: 5)
        #expect(done == .complete([["jsonrpc": "2.0", "id": 1, "result": "A"], ["jsonrpc": "2.0", "id": "x", "result": "B"], refused]))
        #expect(batches.isEmpty)
        #expect(refused["id"] == .null && refused["error"]?["code"] == -32600)
    }

    @Test func notificationsOnlyGetNoAnswerAndALeavingAppsBatchesGo() {
        var batches = AppProtocolBatches()
        #expect(batches.open(1, items: [["jsonrpc": "2.0", "method": "a"]]) == nil && batches.isEmpty)
        _ = batches.open(1, items: [["jsonrpc": "2.0", "id": 1, "method": "a"]])
        batches.appLeft(1)
        #expect(batches.isEmpty && batches.take(["jsonrpc": "2.0", "id": 1, "result": 1], for: 1) == .notBatched)
        #expect(AppProtocolBatches.emptyBatch["error"]?["code"] == -32600)
    }
}
