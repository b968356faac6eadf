import Testing
import WSBridgeProtocol

@testable import WSBridgeCore

@Suite struct NATSTests {
    static let inbox = "_INBOX.test."

    func ready() -> AppProtocolSession {
        var s = AppProtocolSession(codec: NATS(inbox: Self.inbox))
        #expect(s.upstream(#"INFO {"server_id":"x","max_payload":1048576}"# + "\r\n") == [])
        #expect(s.upstream("PONG\r\n") == [])
        #expect(s.wire(s.opened()) == ["ready"])
        return s
    }

    @Test func severalOperationsInAFrameAreSeveralMessagesAndOneMaySpanFrames() {
        var s = self.ready()
        _ = s.app(1, "SUB a 1\r\n")
        let three = "MSG a 1 5\r\nhello\r\nPING\r\nMSG a 1 reply.x 7\r\n{\"n\":1}\r\n"
        #expect(s.upstream(three) == ["app 1 MSG a 1 5\r\nhello\r\n", "up PONG\r\n", "app 1 MSG a 1 reply.x 7\r\n{\"n\":1}\r\n"])
        #expect(s.upstream("MSG a 1 11\r\nhello") == [])
        #expect(s.upstream(" world\r\n") == ["app 1 MSG a 1 11\r\nhello world\r\n"])
        let codec = NATS(inbox: Self.inbox)
        guard case .success(let (messages, _)) = codec.split(Array("HMSG a 9 reply 12 14\r\nNATS/1.0\r\n\r\n{}\r\n".utf8)[...]) else { return }
        #expect(messages[0].view["headers"] == "NATS/1.0\r\n\r\n")
        #expect(messages[0].view["payload"] == .object([]))
        #expect(codec.wireText(messages[0].view) == "HMSG a 9 reply 12 14\r\nNATS/1.0\r\n\r\n{}\r\n")
    }

    @Test func twoAppsOnSidOneGetTheirOwnMessagesAndShareASubject() {
        var s = self.ready()
        #expect(s.app(1, "SUB prices.btc 1\r\n") == ["up SUB prices.btc 1\r\n"])
        #expect(s.app(2, "SUB prices.eth 1\r\n") == ["up SUB prices.eth 2\r\n"])
        #expect(s.upstream("MSG prices.eth 2 2\r\n42\r\n") == ["app 2 MSG prices.eth 1 2\r\n42\r\n"])
        // The same subject (and queue group): one upstream subscription, each app its own sid.
        #expect(s.app(3, "SUB prices.btc 7\r\n") == [])
        #expect(s.upstream("MSG prices.btc 1 1\r\n9\r\n") == ["app 1 MSG prices.btc 1 1\r\n9\r\n", "app 3 MSG prices.btc 7 1\r\n9\r\n"])
        #expect(s.app(3, "SUB prices.btc workers 8\r\n") == ["up SUB prices.btc workers 3\r\n"])
        #expect(s.app(1, "UNSUB 1\r\n") == [])
        #expect(s.app(3, "UNSUB 7\r\n") == ["up UNSUB 1\r\n"])
        #expect(s.wire(s.appLeft(3)) == ["up UNSUB 3\r\n"])
    }

    /// A queue group's members share its messages, each to one of them in turn, as the server
    /// shares them among its members; a plain subscription's holders each get every one.
    @Test func aQueueGroupsHoldersShareItsMessagesInTurn() {
        var s = self.ready()
        #expect(s.app(1, "SUB jobs workers 2\r\n") == ["up SUB jobs workers 1\r\n"])
        #expect(s.app(2, "SUB jobs workers 2\r\n") == [])
        #expect(s.app(3, "SUB jobs workers 5\r\n") == [])
        let taken = (1...6).flatMap { n in s.upstream("MSG jobs 1 1\r\n\(n)\r\n") }
        #expect(taken == [1, 2, 3, 1, 2, 3].enumerated().map { "app \($1) MSG jobs \($1 == 3 ? 5 : 2) 1\r\n\($0 + 1)\r\n" })
        // One leaves: the other two go on in turn.
        _ = s.appLeft(2)
        let after = (1...4).flatMap { _ in s.upstream("MSG jobs 1 1\r\nx\r\n") }.map { $0.prefix(5) }
        #expect(after.filter { $0 == "app 1" }.count == 2 && after.filter { $0 == "app 3" }.count == 2, "\(after)")
    }

    @Test func aPublishWithAReplySubjectIsACallAnsweredThroughTheDaemonsInbox() {
        var s = self.ready()
        #expect(s.app(1, "PUB svc.add my.reply 5\r\n[1,2]\r\n") == ["up PUB svc.add \(Self.inbox)1 5\r\n[1,2]\r\n"])
        #expect(s.app(2, "PUB svc.add my.reply 7\r\n[10,20]\r\n") == ["up PUB svc.add \(Self.inbox)2 7\r\n[10,20]\r\n"])
        #expect(s.upstream("MSG \(Self.inbox)2 0 2\r\n30\r\n") == ["app 2 MSG my.reply 0 2\r\n30\r\n"])
        #expect(s.upstream("MSG \(Self.inbox)1 0 1\r\n3\r\n") == ["app 1 MSG my.reply 0 1\r\n3\r\n"])
        // A client library's own inbox subscription covers its reply subject: as it is.
        _ = s.app(3, "SUB _INBOX.lib.* 4\r\n")
        #expect(s.app(3, "PUB svc.add _INBOX.lib.q1 5\r\n[1,1]\r\n") == ["up PUB svc.add _INBOX.lib.q1 5\r\n[1,1]\r\n"])
        // The link lost with a call in flight: NATS's "no responders" status, at once.
        _ = s.app(1, "PUB svc.slow r.1 0\r\n\r\n")
        #expect(s.wire(s.lost(reason: "gone")) == ["app 1 HMSG r.1 0 39 39\r\nNATS/1.0 503\r\nWsbridged-Error: gone\r\n\r\n\r\n"])
    }

    /// A pool's connections each number from a range of their own: a reply to the daemon's inbox
    /// (every connection gets it) is taken by the one that asked, dropped by the others.
    @Test func aPoolsConnectionsNumberFromRangesOfTheirOwn() {
        var first = self.ready()
        var second = self.ready()
        second.numberIDs(after: 1 << 40)
        #expect(first.app(1, "PUB svc.a r 0\r\n\r\n") == ["up PUB svc.a \(Self.inbox)1 0\r\n\r\n"])
        #expect(second.app(2, "SUB s 1\r\n") == ["up SUB s 1099511627777\r\n"])
        #expect(second.app(3, "PUB svc.b r 0\r\n\r\n") == ["up PUB svc.b \(Self.inbox)1099511627778 0\r\n\r\n"])
        let reply = "MSG \(Self.inbox)1 0 1\r\n3\r\n"
        #expect(first.upstream(reply) == ["app 1 MSG r 0 1\r\n3\r\n"])
        #expect(second.upstream(reply) == [])
        // What the pool routes by: where an app's id is, where a subscription is held.
        #expect(second.knows(2, WireID(.string("1"))) && !first.knows(2, WireID(.string("1"))))
        #expect(second.holds(subscription: "s") && !first.holds(subscription: "s"))
        #expect(second.subscriptionLoad { _ in 3 } == 3 && first.subscriptionLoad { _ in 3 } == 0)
    }

    @Test func theDaemonAnswersPingsAndRefusesWhatItCannotShare() {
        var s = self.ready()
        #expect(s.upstream("PING\r\n") == ["up PONG\r\n"])
        #expect(s.app(1, "PING\r\n") == ["app 1 PONG\r\n"])
        #expect(s.app(1, #"CONNECT {"verbose":false}"# + "\r\n") == ["app 1 +OK\r\n"])
        #expect(s.app(1, "UNSUB 1 5\r\n").first?.hasPrefix("refuse UNSUB with a count") == true)
        #expect(
            s.upstream("-ERR 'Permissions Violation for Subscription to \"secret\"'\r\n") == [
                "broadcast", "error Permissions Violation for Subscription to \"secret\"",
            ])
        guard case .failure(let error) = s.codec.parse(app: "PUB a 10\r\nshort\r\n") else {
            Issue.record("a cut PUB was accepted")
            return
        }
        #expect(error.description.contains("ends inside"))
    }

    @Test(arguments: [
        ("a.b.c", "a.b.c", true), ("a.b.c", "a.*.c", true), ("a.b.c", "a.>", true), ("a", "a.>", false), ("a.b", "a.*.c", false),
        ("a.b.c", "*", false),
    ])
    func subjectsMatchAsNATSMatchesThem(_ subject: String, _ pattern: String, _ matches: Bool) {
        #expect(NATS.subject(subject, matches: pattern[...]) == matches)
    }

    @Test func aPermissionsViolationNamesTheSubscriptionItRefused() {
        #expect(NATS.refusedSubscription(#"Permissions Violation for Subscription to "secret.x""#) == "secret.x")
        #expect(NATS.refusedSubscription(#"Permissions Violation for Subscription to "a.b" using queue "q""#) == "a.b q")
        #expect(NATS.refusedSubscription(#"Permissions Violation for Publish to "a.b""#) == nil)
        #expect(NATS.refusedSubscription("Maximum Subscriptions Exceeded") == nil)
        // In the session: the subscription with that key is set aside, its holder told; a later
        // open does not send it.
        var s = self.ready()
        _ = s.app(1, "SUB ok 1\r\n")
        _ = s.app(2, "SUB secret.x 5\r\n")
        let refused = s.upstream("-ERR 'Permissions Violation for Subscription to \"secret.x\"'\r\n")
        #expect(
            refused.contains("broadcast") && refused.contains { $0.hasPrefix("app 2 HMSG 5 ") && $0.contains("set aside: the server refused it") }, "\(refused)"
        )
        _ = s.lost(reason: "gone", closedRightAfterOpen: nil)
        let again = s.wire(s.opened()).filter { $0.contains("SUB") }
        #expect(again.count == 1 && again.allSatisfy { $0.hasPrefix("up SUB ok ") }, "\(again)")
    }
}
