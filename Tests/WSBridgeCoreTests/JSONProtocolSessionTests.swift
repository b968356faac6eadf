import Testing
import WSBridgeProtocol

@testable import WSBridgeCore

typealias JSONSession = AppProtocolSession

private func mayRoute(_ router: AppProtocolSession, _ text: String) -> Bool {
    Array(text.utf8).withUnsafeBytes { router.routing?.mayRoute($0) ?? true }
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
        var s = JSONSession(codec: JSONProtocol(), limits: AppProtocolLimits(subscriptionBytes: 60))
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
