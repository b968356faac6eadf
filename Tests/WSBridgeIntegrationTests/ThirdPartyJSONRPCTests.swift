import Foundation
import Testing
import WSBridgeProtocol

/// `upstream.protocol = "jsonrpc"` against a JSON-RPC server nobody here wrote: aiohttp-json-rpc
/// from PyPI (Tests/peers/aiohttp_jsonrpc_peer.py only registers its methods). Two apps calling
/// with the same ids at the same time, through `request` without `match` (issue 33).
@Suite(.serialized) struct ThirdPartyJSONRPCTests {
    static func rpc(_ id: Int, _ method: String, _ params: JSONValue) -> String {
        let message: JSONValue = ["jsonrpc": "2.0", "id": .number(JSONNumber(id)), "method": .string(method), "params": params]
        return message.serialized
    }

    static func request(_ c: SocketClient, _ text: String, id: String, timeout: Int = 20) {
        let line: JSONValue = ["id": .string(id), "op": "request", "text": .string(text), "timeout": .number(JSONNumber(timeout))]
        c.send(line.serialized)
    }

    @Test func twoAppsOnTheSameIdsGetTheirOwnAnswersAndACallInFlightGetsLinkLost() async throws {
        let dir = try TemporaryDirectory()
        let (peer, port) = try await pythonPeer("aiohttp_jsonrpc_peer.py", port: 0)
        defer { peer.stop() }
        let (daemon, socket) = try await JSONRPCProtocolTests.daemon(dir, port: port)
        defer { daemon.stop() }
        let a = try await JSONRPCProtocolTests.app(socket, "a")
        let b = try await JSONRPCProtocolTests.app(socket, "b")
        for round in 0..<10 {
            Self.request(a, Self.rpc(1, "add", [10, .number(JSONNumber(round))]), id: "a\(round)")
            Self.request(b, Self.rpc(1, "add", [1000, .number(JSONNumber(round))]), id: "b\(round)")
            let ra = await a.reply("a\(round)")
            let rb = await b.reply("b\(round)")
            #expect(ra?.value(at: "result.json.result")?.intValue == 10 + round && ra?.value(at: "result.json.id") == 1, "\(String(describing: ra))")
            #expect(rb?.value(at: "result.json.result")?.intValue == 1000 + round && rb?.value(at: "result.json.id") == 1, "\(String(describing: rb))")
        }
        // The server saw twenty different ids.
        let ids = peer.stdout.lines.filter { $0.hasPrefix("call add ") }
        #expect(ids.count == 20 && Set(ids).count == 20, "\(ids)")
        // Its topics are its own fan-out (notifications without an id): for every subscriber.
        Self.request(a, Self.rpc(2, "subscribe", ["ticks"]), id: "sub")
        #expect(await a.reply("sub")?.value(at: "result.json.result") == ["ticks"])
        for c in [a, b] {
            #expect(await JSONRPCProtocolTests.waitFor(c) { $0["method"] == "ticks" } != nil)
        }
        // A call in flight when the server goes: link_lost at once, not at its 60 s timeout.
        Self.request(a, Self.rpc(3, "slow", [120]), id: "slow", timeout: 600)
        #expect(await peer.stdout.wait(timeout: .seconds(20)) { $0.hasPrefix("call slow ") } != nil)
        peer.stop()
        let lost = await a.reply("slow", timeout: .seconds(60))
        #expect(lost?.value(at: "error.code") == "link_lost", "\(String(describing: lost))")
    }
}
