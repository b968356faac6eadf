import Testing
import WSBridgeProtocol

@testable import WSBridgeCore

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
        // acknowledged the handshake); then every subscription, with fresh ids: none worked
        // yet, so one at a time, the next once the one before it delivers.
        #expect(s.fromApp(2, self.subscribe("9", Self.q2)) == [])
        #expect(s.fromUpstream(json(#"{"type":"connection_ack"}"#)) == [])
        #expect(s.opened() == [.ready, .upstream(self.subscribe("3", Self.q1))])
        #expect(
            s.fromUpstream(json(#"{"type":"next","id":"3","payload":{}}"#)) == [
                .app(1, json(#"{"type":"next","id":"1","payload":{}}"#)), .app(3, json(#"{"type":"next","id":"a","payload":{}}"#)),
                .upstream(self.subscribe("4", Self.q2)),
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

    /// The same operation written on many lines (gql prints documents so) or on one, with
    /// commas and comments or not, and its payload's keys in any order, is one subscription;
    /// what is in its strings counts as written.
    @Test func aDocumentsLayoutIsNoPartOfItsSubscriptionsKey() {
        let printed = "subscription ($name: String!) {\n  ticks(name: $name) {\n    name\n    n\n  }\n}"
        let compact = "subscription($name:String!){ticks(name:$name){name,n}} # the ticker"
        #expect(GraphQLTransportWS.compact(printed) == "subscription($name:String!){ticks(name:$name){name n}}")
        #expect(GraphQLTransportWS.compact(printed) == GraphQLTransportWS.compact(compact))
        let a: JSONValue = ["query": .string(printed), "variables": ["name": "alpha"]]
        let b: JSONValue = ["variables": ["name": "alpha"], "query": .string(compact)]
        #expect(GraphQLTransportWS.subscriptionKey(a) == GraphQLTransportWS.subscriptionKey(b))
        // Strings keep their spaces, commas and #s; block strings too.
        #expect(GraphQLTransportWS.compact("{ a(s: \"x ,  # y\") }") == "{a(s:\"x ,  # y\")}")
        #expect(GraphQLTransportWS.compact("{ a(s: \"\"\" x ,\n \\\"\"\" \"\"\") b }") == "{a(s:\"\"\" x ,\n \\\"\"\" \"\"\")b}")
        #expect(GraphQLTransportWS.compact("{ a(s: \"x\") }") != GraphQLTransportWS.compact("{ a(s: \"x \") }"))
        var s = GraphQL(codec: GraphQLTransportWS())
        _ = s.opened()
        let subscribe = { (app: AppID, query: String) -> [AppProtocolEffect] in
            s.fromApp(app, ["type": "subscribe", "id": "1", "payload": ["query": .string(query), "variables": ["name": "alpha"]]])
        }
        #expect(subscribe(1, printed).count == 1)
        #expect(subscribe(2, compact).isEmpty, "the second app shares the first's subscription")
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
