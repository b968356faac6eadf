import Testing
import WSBridgeProtocol

@testable import WSBridgeCore

private func json(_ text: String) -> JSONValue {
    do { return try JSONValue.parse(text) } catch { fatalError("bad test JSON \(text): \(error)") }
}

typealias GraphQL = ProtocolSession
typealias RPC = ProtocolSession

/// Two apps that use the same ids at the same time, over one connection (issue 33).
@Suite struct GraphQLTransportWSSessionTests {
    static let q1 = #"{"query":"subscription { ticks }"}"#
    static let q2 = #"{"query":"subscription { trades(symbol: \"X\") }"}"#

    func subscribe(_ id: String, _ payload: String) -> JSONValue { json(#"{"type":"subscribe","id":"\#(id)","payload":\#(payload)}"#) }

    func readySession() -> GraphQL {
        var s = GraphQL(codec: GraphQLTransportWS())
        // The link sends connection_init and waits for the ack (its opening message and ready
        // gate): the ack comes before the session is told the link opened.
        #expect(s.fromUpstream(json(#"{"type":"connection_ack"}"#)) == [])
        #expect(s.opened() == [.ready])
        return s
    }

    @Test func sameIdsFromTwoAppsNeverCollideAndAnswersGoToTheirOwner() {
        var s = self.readySession()
        #expect(s.fromApp(1, self.subscribe("1", Self.q1)) == [.upstream(self.subscribe("1", Self.q1))])
        // App 2's "1" is another subscription: a fresh id on the wire.
        #expect(s.fromApp(2, self.subscribe("1", Self.q2)) == [.upstream(self.subscribe("2", Self.q2))])
        #expect(
            s.fromUpstream(json(#"{"type":"next","id":"2","payload":{"data":{"trades":1}}}"#)) == [
                .app(2, json(#"{"type":"next","id":"1","payload":{"data":{"trades":1}}}"#))
            ])
        #expect(
            s.fromUpstream(json(#"{"type":"next","id":"1","payload":{"data":{"ticks":1}}}"#)) == [
                .app(1, json(#"{"type":"next","id":"1","payload":{"data":{"ticks":1}}}"#))
            ])
        // The same app may not use one id twice.
        guard case .refuse(let reason) = s.fromApp(1, self.subscribe("1", Self.q2)).first else {
            Issue.record("a duplicate id was accepted")
            return
        }
        #expect(reason.contains("already in use"))
    }

    @Test func identicalSubscriptionsGoUpstreamOnceAndEndWithTheLastHolder() {
        var s = self.readySession()
        _ = s.fromApp(1, self.subscribe("1", Self.q1))
        #expect(s.fromApp(3, self.subscribe("7", Self.q1)) == [])
        #expect(
            s.fromUpstream(json(#"{"type":"next","id":"1","payload":{"n":1}}"#)) == [
                .app(1, json(#"{"type":"next","id":"1","payload":{"n":1}}"#)), .app(3, json(#"{"type":"next","id":"7","payload":{"n":1}}"#)),
            ])
        #expect(s.liveSubscriptions.first?.holders.count == 2)
        // The first holder leaves: still held, nothing upstream.
        #expect(s.appLeft(1) == [])
        // The last completes it: ended upstream, under its upstream id.
        #expect(s.fromApp(3, json(#"{"type":"complete","id":"7"}"#)) == [.upstream(json(#"{"type":"complete","id":"1"}"#))])
        #expect(s.liveSubscriptions.isEmpty)
    }

    @Test func theDaemonOwnsTheHandshakeAndTheKeepalives() {
        var s = self.readySession()
        #expect(s.fromUpstream(json(#"{"type":"ping"}"#)) == [.upstream(json(#"{"type":"pong"}"#))])
        #expect(s.fromUpstream(json(#"{"type":"pong"}"#)) == [])
        #expect(s.fromApp(1, json(#"{"type":"connection_init","payload":{}}"#)) == [.app(1, json(#"{"type":"connection_ack"}"#))])
        #expect(s.fromApp(1, json(#"{"type":"ping","payload":{"x":1}}"#)) == [.app(1, json(#"{"type":"pong","payload":{"x":1}}"#))])
        #expect(s.fromApp(1, json(#"{"type":"pong"}"#)) == [])
    }

    @Test func subscriptionsAreSentAgainWithFreshIdsAfterEveryOpenAndKeepTheAppsIds() {
        var s = self.readySession()
        _ = s.fromApp(1, self.subscribe("1", Self.q1))
        _ = s.fromApp(2, self.subscribe("1", Self.q2))
        _ = s.fromApp(3, self.subscribe("a", Self.q1))
        #expect(s.lost(reason: "link lost") == [])
        // Nothing goes while the link is down (its ready gate holds it until the server
        // acknowledged the handshake); then every subscription, with fresh ids.
        #expect(s.fromApp(2, self.subscribe("9", Self.q2)) == [])
        #expect(s.fromUpstream(json(#"{"type":"connection_ack"}"#)) == [])
        #expect(s.opened() == [.ready, .upstream(self.subscribe("3", Self.q1)), .upstream(self.subscribe("4", Self.q2))])
        #expect(
            s.fromUpstream(json(#"{"type":"next","id":"3","payload":{}}"#)) == [
                .app(1, json(#"{"type":"next","id":"1","payload":{}}"#)), .app(3, json(#"{"type":"next","id":"a","payload":{}}"#)),
            ])
        #expect(
            s.fromUpstream(json(#"{"type":"next","id":"4","payload":{}}"#)) == [
                .app(2, json(#"{"type":"next","id":"1","payload":{}}"#)), .app(2, json(#"{"type":"next","id":"9","payload":{}}"#)),
            ])
        // An id of the earlier connection belongs to nobody now.
        #expect(s.fromUpstream(json(#"{"type":"next","id":"1","payload":{}}"#)) == [])
    }

    @Test func aQueryIsACallItsAnswersEndAndTheLinkLossAnswersIt() {
        var s = self.readySession()
        #expect(s.fromApp(1, self.subscribe("q", #"{"query":"query { price }"}"#)) == [.upstream(self.subscribe("1", #"{"query":"query { price }"}"#))])
        #expect(
            s.fromUpstream(json(#"{"type":"next","id":"1","payload":{"data":{"price":3}}}"#)) == [
                .app(1, json(#"{"type":"next","id":"q","payload":{"data":{"price":3}}}"#))
            ])
        #expect(s.fromUpstream(json(#"{"type":"complete","id":"1"}"#)) == [.app(1, json(#"{"type":"complete","id":"q"}"#))])
        #expect(s.count == 0)
        _ = s.fromApp(2, self.subscribe("m", #"{"query":"mutation { buy }"}"#))
        #expect(
            s.lost(reason: "the upstream link was lost") == [
                .app(2, json(#"{"type":"error","id":"m","payload":[{"message":"wsbridged: the upstream link was lost"}]}"#))
            ])
    }

    /// An id is the app's again once what it named is over (the server ended it, the app
    /// completed it, the link took the call), and nothing is left after the app goes.
    @Test func anAppsIdsAreFreeOnceWhatTheyNamedIsOver() {
        var s = self.readySession()
        _ = s.fromApp(1, self.subscribe("1", Self.q1))
        _ = s.fromApp(1, self.subscribe("q", #"{"query":"query { a }"}"#))
        #expect(s.held(by: 1) == 2)
        _ = s.fromUpstream(json(#"{"type":"complete","id":"1"}"#))
        _ = s.fromApp(1, json(#"{"type":"complete","id":"q"}"#))
        #expect(s.held(by: 1) == 0 && s.count == 0)
        #expect(s.fromApp(1, self.subscribe("1", Self.q2)) == [.upstream(self.subscribe("3", Self.q2))])
        _ = s.fromApp(2, self.subscribe("1", Self.q2))
        #expect(s.appLeft(1) == [])
        #expect(s.held(by: 1) == 0 && s.held(by: 2) == 1)
        #expect(s.appLeft(2) == [.upstream(json(#"{"type":"complete","id":"3"}"#))])
        #expect(s.count == 0)
    }

    @Test(arguments: [
        ("subscription { a }", true), ("  # a comment\n subscription S { a }", true), (",subscription{a}", true),
        ("query { a }", false), ("{ a }", false), ("subscriptions { a }", false), ("mutation { a }", false),
        // Fragments first, with braces and strings inside: the operation after them counts.
        ("fragment F on T { a { b } c(x: \"}\") }\nsubscription { ...F }", true),
        ("fragment F on T { a(d: \"\"\" } \"\"\") }\nquery Q { ...F }", false),
    ])
    func anOperationIsASubscriptionByItsFirstOperation(_ document: String, _ expected: Bool) {
        #expect(GraphQLTransportWS.isSubscription(document) == expected)
    }

    /// With several operations, the one operationName names.
    @Test func operationNameChoosesTheOperation() {
        let document = "query A { a }\nsubscription B($x: Int = 1) @d { b(x: $x) }\nmutation C { c }"
        #expect(!GraphQLTransportWS.isSubscription(document))
        #expect(GraphQLTransportWS.isSubscription(document, operationName: "B"))
        #expect(!GraphQLTransportWS.isSubscription(document, operationName: "C"))
        #expect(!GraphQLTransportWS.isSubscription(document, operationName: "Z"))
    }
}

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
        #expect(s.fromApp(1, json(#"[{"jsonrpc":"2.0","id":9,"method":"a"}]"#)).first.map { "\($0)".contains("batches are not supported") } == true)
        #expect(s.fromApp(1, json(#"{"jsonrpc":"2.0","id":{"a":1},"method":"a"}"#)).first.map { "\($0)".contains("a string or a number") } == true)
    }
}

typealias JSONSession = ProtocolSession

private func mayRoute(_ router: ProtocolSession, _ text: String) -> Bool {
    Array(text.utf8).withUnsafeBytes { router.mayRoute($0) }
}

/// `json`: ids at a configured path, rising on the wire; sticky sends with an id are
/// subscriptions; the feed's keepalive answered by its configured reply (issue 33).
@Suite struct JSONProtocolSessionTests {
    func session() throws -> JSONSession {
        let reply = JSONProtocol.Reply(when: Filter(parsing: "ping"), send: try ReplyTemplate(parsing: #"{"pong":${msg:ping}}"#))
        var s = JSONSession(codec: JSONProtocol(idPath: "id", replies: [reply]))
        #expect(s.opened() == [.ready])
        return s
    }

    @Test func callsFromTwoAppsOnOneIdGetRisingWireIdsAndTheirOwnAnswer() throws {
        var s = try self.session()
        #expect(s.fromApp(1, json(#"{"id":1,"type":"get"}"#)) == [.upstream(json(#"{"id":1,"type":"get"}"#))])
        #expect(s.fromApp(2, json(#"{"id":1,"type":"get"}"#)) == [.upstream(json(#"{"id":2,"type":"get"}"#))])
        #expect(s.fromUpstream(json(#"{"id":2,"result":"b"}"#)) == [.app(2, json(#"{"id":1,"result":"b"}"#))])
        #expect(s.fromUpstream(json(#"{"id":1,"result":"a"}"#)) == [.app(1, json(#"{"id":1,"result":"a"}"#))])
        // The first answer ends a call: a second with its id is data, for everyone.
        #expect(s.fromUpstream(json(#"{"id":1,"result":"again"}"#)) == [.broadcast])
        // An id that is data (nobody holds it) and a message without one: for everyone.
        #expect(s.fromUpstream(json(#"{"id":"BTC","price":1}"#)) == [.broadcast])
        #expect(s.fromUpstream(json(#"{"price":1}"#)) == [.broadcast])
        // A message without the id goes as it is.
        #expect(s.fromApp(1, json(#"{"type":"hello"}"#)) == [.upstream(json(#"{"type":"hello"}"#))])
    }

    @Test func theBytesOfKeptSubscriptionsAreBounded() throws {
        var s = JSONSession(codec: JSONProtocol(), limits: ProtocolLimits(subscriptionBytes: 60))
        _ = s.opened()
        let big = json(#"{"id":1,"type":"subscribe_events","event_type":"a"}"#)  // 50 bytes
        #expect(s.stickySubscribe(1, big, key: "a").count == 1)
        let refused = s.stickySubscribe(2, json(#"{"id":1,"type":"subscribe_events","event_type":"b"}"#), key: "b")
        guard case .refuse(let why)? = refused.first else {
            Issue.record("\(refused)")
            return
        }
        #expect(why.contains("protocol.max_subscription_bytes"))
        // Nothing held for the refused one; the first one's bytes come back when it ends.
        #expect(s.held(by: 2) == 0)
        _ = s.appLeft(1)
        #expect(s.subscriptionBytes == 0)
        #expect(s.stickySubscribe(2, json(#"{"id":1,"type":"subscribe_events","event_type":"b"}"#), key: "b").count == 1)
    }

    /// A message without the id's key or a reply's is a broadcast, known without parsing it.
    @Test func messagesWithoutTheProtocolsKeysNeedNoParsing() throws {
        let s = try self.session()
        #expect(!mayRoute(s, #"{"t":1,"p":"idea"}"#))
        #expect(mayRoute(s, #"{"id":"BTC","price":1}"#))
        #expect(mayRoute(s, #"{"ping":3}"#))
        #expect(mayRoute(s, #"{"\u0069d":3}"#))
        let rpc = RPC(codec: JSONRPC())
        #expect(!mayRoute(rpc, #"{"jsonrpc":"2.0","method":"tick","params":{"n":1}}"#))
        #expect(mayRoute(rpc, #"{"jsonrpc":"2.0","method":"s","params":{"subscription":"0x1"}}"#))
        #expect(mayRoute(GraphQL(codec: GraphQLTransportWS()), "{}"))
    }

    @Test func theKeepaliveIsAnsweredByItsTemplate() throws {
        var s = try self.session()
        #expect(s.fromUpstream(json(#"{"ping":17}"#)) == [.upstream(json(#"{"pong":17}"#))])
    }

    @Test func aStickySubscriptionKeepsItsHoldersAcrossOpensWithFreshRisingIds() throws {
        var s = try self.session()
        let subscribe = json(#"{"id":5,"type":"subscribe_events"}"#)
        #expect(s.stickySubscribe(1, subscribe, key: "ev") == [.upstream(json(#"{"id":1,"type":"subscribe_events"}"#))])
        // Every message with its id goes to its holder, under the app's id; none ends it.
        #expect(s.fromUpstream(json(#"{"id":1,"type":"result"}"#)) == [.app(1, json(#"{"id":5,"type":"result"}"#))])
        #expect(s.fromUpstream(json(#"{"id":1,"type":"event","n":1}"#)) == [.app(1, json(#"{"id":5,"type":"event","n":1}"#))])
        // Another app's sticky send under the same key shares it; the daemon's goes to everyone.
        #expect(s.stickySubscribe(2, json(#"{"id":9,"type":"subscribe_events"}"#), key: "ev") == [])
        #expect(s.stickySubscribe(AppID.everyone, json(#"{"id":3,"type":"other"}"#), key: "all") == [.upstream(json(#"{"id":2,"type":"other"}"#))])
        _ = s.lost(reason: "gone")
        // The next open: sent again, with ids above every earlier one.
        #expect(
            s.opened() == [
                .ready, .upstream(json(#"{"id":3,"type":"subscribe_events"}"#)), .upstream(json(#"{"id":4,"type":"other"}"#)),
            ])
        #expect(
            s.fromUpstream(json(#"{"id":3,"type":"event","n":1}"#)) == [
                .app(1, json(#"{"id":5,"type":"event","n":1}"#)), .app(2, json(#"{"id":9,"type":"event","n":1}"#)),
            ])
        #expect(s.fromUpstream(json(#"{"id":4,"x":1}"#)) == [.app(AppID.everyone, json(#"{"id":3,"x":1}"#))])
        // Let go by both holders: ended (json has no end message to send).
        #expect(s.stickyRelease(1, key: "ev") == [])
        #expect(s.stickyRelease(1, key: "ev") == nil)
        #expect(s.appLeft(2) == [])
        #expect(s.liveSubscriptions.map(\.key) == ["sticky all"])
    }
}

/// A subscription after which the server closes the link right after open, open after open, is
/// set aside: the others flow again, its holders are told, an operator may send it again.
@Suite struct SetAsideTests {
    static let good = json(#"{"type":"subscribe","id":"1","payload":{"query":"subscription { a }"}}"#)
    static let poison = json(#"{"type":"subscribe","id":"1","payload":{"query":"subscription { b }","operationName":7}}"#)

    @Test func theSubscriptionSentLastBeforeEarlyClosesIsSetAsideAfterThreeInARow() {
        var s = GraphQL(codec: GraphQLTransportWS(), limits: ProtocolLimits(setAsideAfter: 3))
        _ = s.opened()
        #expect(s.fromApp(1, Self.good).count == 1)
        #expect(s.fromApp(2, Self.poison).count == 1)
        // Not right after open (the link's state machine says which): laid at nothing.
        #expect(s.lost(reason: "gone", closedRightAfterOpen: nil).isEmpty)
        #expect(s.culprit == nil)
        for open in 1...3 {
            let sent = s.opened()
            #expect(sent.count == 3, "open \(open): \(sent)")  // ready, a, b
            let told = s.lost(reason: "gone", closedRightAfterOpen: "closed by the server: 4400 bad")
            #expect(s.culprit?.contains("operationName") == true && s.culprit?.contains(#"client 2 as "1""#) == true)
            #expect(s.culprit?.contains("\(open) time") == true, "\(String(describing: s.culprit))")
            if open < 3 {
                #expect(told.isEmpty)
            } else {
                // Its holder is told, in the protocol's words, for its own id.
                guard case .app(2, let error)? = told.first, told.count == 1 else {
                    Issue.record("\(told)")
                    return
                }
                #expect(error["type"] == "error" && error["id"] == "1")
            }
        }
        // The next open: only the good one goes; it is listed as set aside.
        #expect(s.opened().count == 2)
        #expect(s.liveSubscriptions.filter { $0.setAside != nil }.count == 1)
        // The operator clears it: sent again at once, with a fresh id.
        let (count, effects) = s.clearSetAside()
        #expect(count == 1 && effects.count == 1)
        #expect(s.liveSubscriptions.allSatisfy { $0.setAside == nil })
    }

    @Test func aStableOpenClearsTheCount() {
        var s = GraphQL(codec: GraphQLTransportWS(), limits: ProtocolLimits(setAsideAfter: 2))
        _ = s.opened()
        _ = s.fromApp(1, Self.poison)
        for (early, expectSetAside) in [(true, false), (false, false), (true, false), (true, true)] {
            _ = s.opened()
            _ = s.lost(reason: "gone", closedRightAfterOpen: early ? "closed" : nil)
            #expect((s.liveSubscriptions.first?.setAside != nil) == expectSetAside, "early: \(early)")
        }
    }
}

/// An id is compared by its JSON text: the number 1 and the string "1" are two ids.
@Suite struct WireIDTests {
    @Test func aNumberAndAStringOfTheSameDigitsAreTwoIds() {
        #expect(WireID(json("1")).key == "1" && WireID(json("1.50")).key == "1.50" && WireID(json("-7e3")).key == "-7e3")
        #expect(WireID(json(#""1""#)).key == #""1""# && WireID(json(#""a\"b""#)).key == #""a\"b""#)
        #expect(WireID(json("1")) != WireID(json(#""1""#)))
        #expect(WireID(json("1")) == WireID(.number(JSONNumber(1))))
        #expect(Set([WireID(json("1")), WireID(json(#""1""#)), WireID(json("1"))]).count == 2)
    }
}
