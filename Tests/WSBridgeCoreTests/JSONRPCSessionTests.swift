import Testing
import WSBridgeProtocol

@testable import WSBridgeCore

@Suite struct JSONRPCSessionTests {
    func readySession(limits: RPC.Limits = .init()) -> RPC {
        var s = RPC(codec: JSONRPC(), limits: limits)
        #expect(s.opened() == [.ready])
        return s
    }

    @Test func callsWithTheSameIdFromTwoAppsGetTheirOwnAnswers() {
        var s = self.readySession()
        #expect(
            s.fromApp(1, json(#"{"jsonrpc":"2.0","id":1,"method":"add","params":[10,20]}"#)) == [
                .upstream(json(#"{"jsonrpc":"2.0","id":1,"method":"add","params":[10,20]}"#))
            ])
        #expect(
            s.fromApp(2, json(#"{"jsonrpc":"2.0","id":1,"method":"add","params":[1,2]}"#)) == [
                .upstream(json(#"{"jsonrpc":"2.0","id":2,"method":"add","params":[1,2]}"#))
            ])
        #expect(s.fromUpstream(json(#"{"jsonrpc":"2.0","id":2,"result":3}"#)) == [.app(2, json(#"{"jsonrpc":"2.0","id":1,"result":3}"#))])
        #expect(s.fromUpstream(json(#"{"jsonrpc":"2.0","id":1,"result":30}"#)) == [.app(1, json(#"{"jsonrpc":"2.0","id":1,"result":30}"#))])
        // Answered: the ids are free again; a notification from an app goes as it is.
        #expect(s.count == 0)
        #expect(
            s.fromApp(1, json(#"{"jsonrpc":"2.0","method":"log","params":["x"]}"#)) == [.upstream(json(#"{"jsonrpc":"2.0","method":"log","params":["x"]}"#))])
        #expect(s.fromUpstream(json(#"{"jsonrpc":"2.0","method":"announce","params":{"x":1}}"#)) == [.broadcast])
    }

    @Test func aServerAssignedSubscriptionIdStaysTheOneTheAppSawAcrossReconnects() {
        var s = self.readySession()
        let subscribe = #"{"jsonrpc":"2.0","id":5,"method":"eth_subscribe","params":["newHeads"]}"#
        #expect(s.fromApp(1, json(subscribe)) == [.upstream(json(#"{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}"#))])
        #expect(s.fromUpstream(json(#"{"jsonrpc":"2.0","id":1,"result":"0xabc"}"#)) == [.app(1, json(#"{"jsonrpc":"2.0","id":5,"result":"0xabc"}"#))])
        // A second app, the same subscription: answered here, not sent again.
        #expect(
            s.fromApp(2, json(#"{"jsonrpc":"2.0","id":5,"method":"eth_subscribe","params":["newHeads"]}"#)) == [
                .app(2, json(#"{"jsonrpc":"2.0","id":5,"result":"0xabc"}"#))
            ])
        let event = #"{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xabc","result":{"n":1}}}"#
        #expect(s.fromUpstream(json(event)) == [.app(1, json(event)), .app(2, json(event))])

        #expect(s.lost(reason: "link lost") == [])
        #expect(s.opened() == [.ready, .upstream(json(#"{"jsonrpc":"2.0","id":2,"method":"eth_subscribe","params":["newHeads"]}"#))])
        // The new server id is the daemon's business: the apps were answered already.
        #expect(s.fromUpstream(json(#"{"jsonrpc":"2.0","id":2,"result":"0xdef"}"#)) == [])
        #expect(
            s.fromUpstream(json(#"{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xdef","result":{"n":2}}}"#)) == [
                .app(1, json(#"{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xabc","result":{"n":2}}}"#)),
                .app(2, json(#"{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xabc","result":{"n":2}}}"#)),
            ])
        // The first leaves with eth_unsubscribe: answered here, the other still holds it.
        #expect(
            s.fromApp(1, json(#"{"jsonrpc":"2.0","id":11,"method":"eth_unsubscribe","params":["0xabc"]}"#)) == [
                .app(1, json(#"{"jsonrpc":"2.0","id":11,"result":true}"#))
            ])
        // The last goes away: ended upstream with the server's current id.
        #expect(s.appLeft(2) == [.upstream(json(#"{"jsonrpc":"2.0","id":3,"method":"eth_unsubscribe","params":["0xdef"]}"#))])
        #expect(s.liveSubscriptions.isEmpty)
    }

    @Test func aCallInFlightWhenTheLinkDropsIsAnsweredWithAnError() {
        var s = self.readySession()
        _ = s.fromApp(4, json(#"{"jsonrpc":"2.0","id":"x","method":"slow"}"#))
        #expect(
            s.lost(reason: "the upstream link was lost") == [
                .app(4, json(#"{"jsonrpc":"2.0","id":"x","error":{"code":-32000,"message":"wsbridged: the upstream link was lost"}}"#))
            ])
        // Its late answer, should one come on a new connection, finds nobody.
        _ = s.opened()
        #expect(s.fromUpstream(json(#"{"jsonrpc":"2.0","id":1,"result":0}"#)) == [])
    }

    @Test func boundsAndBadInputAreRefusedWithTheSettingOrTheReason() {
        var s = self.readySession(limits: .init(perApp: 2, total: 3))
        _ = s.fromApp(1, json(#"{"jsonrpc":"2.0","id":1,"method":"a"}"#))
        _ = s.fromApp(1, json(#"{"jsonrpc":"2.0","id":2,"method":"a"}"#))
        #expect(s.fromApp(1, json(#"{"jsonrpc":"2.0","id":3,"method":"a"}"#)).first.map { "\($0)".contains("protocol.max_per_app") } == true)
        _ = s.fromApp(2, json(#"{"jsonrpc":"2.0","id":1,"method":"a"}"#))
        #expect(s.fromApp(3, json(#"{"jsonrpc":"2.0","id":1,"method":"a"}"#)).first.map { "\($0)".contains("protocol.max_total") } == true)
        // A batch is taken apart by the protocol layer (AppProtocolBatches) before the session.
        #expect(s.fromApp(1, json(#"[[{"jsonrpc":"2.0","id":9,"method":"a"}]]"#)).first.map { "\($0)".contains("an object, or a batch") } == true)
        #expect(s.fromApp(1, json(#"{"jsonrpc":"2.0","id":{"a":1},"method":"a"}"#)).first.map { "\($0)".contains("a string or a number") } == true)
    }
}
