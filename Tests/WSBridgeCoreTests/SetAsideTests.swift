import Testing
import WSBridgeProtocol

@testable import WSBridgeCore

/// A subscription after which the server closes the link right after open, open after open, is
/// set aside: the others flow again, its holders are told, an operator may send it again.
@Suite struct SetAsideTests {
    static let good = json(#"{"type":"subscribe","id":"1","payload":{"query":"subscription { a }"}}"#)
    static let poison = json(#"{"type":"subscribe","id":"1","payload":{"query":"subscription { b }","operationName":7}}"#)

    @Test func theSubscriptionSentLastBeforeEarlyClosesIsSetAsideAfterThreeInARow() {
        var s = GraphQL(codec: GraphQLTransportWS(), limits: AppProtocolLimits(setAsideAfter: 3))
        _ = s.opened()
        #expect(s.fromApp(1, Self.good).count == 1)
        #expect(s.fromApp(2, Self.poison).count == 1)
        // Not right after open (the link's state machine says which): laid at nothing.
        #expect(s.lost(reason: "gone", closedRightAfterOpen: nil).isEmpty)
        #expect(s.culprit == nil)
        for open in 1...3 {
            // The first time: ready and a, and once a delivers, b (neither worked before, so one
            // at a time). After that a worked: ready, a, b at once.
            let sent = s.opened()
            if open == 1 {
                guard sent.count == 2, case .upstream(let a) = sent[1], let id = a["id"] else {
                    Issue.record("open \(open): \(sent)")
                    return
                }
                let next: JSONValue = ["type": "next", "id": id, "payload": ["data": ["a": 1]]]
                let b = s.fromUpstream(next)
                #expect(b.count == 2 && b.last.map { if case .upstream(let m) = $0 { m["payload"]?["operationName"] == 7 } else { false } } == true, "\(b)")
            } else {
                #expect(sent.count == 3, "open \(open): \(sent)")
            }
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

    /// A subscription the server answered before is sent first on the next open and never
    /// blamed: the close is laid at the one that never worked, even when it is the older one
    /// (issue 44: the last one sent was blamed, a working one the others' culprit).
    @Test func aSubscriptionThatWorkedBeforeGoesFirstAndIsNeverBlamed() {
        var s = GraphQL(codec: GraphQLTransportWS(), limits: AppProtocolLimits(setAsideAfter: 3))
        _ = s.opened()
        // The poison one first (never answered), then the good one, which the server feeds.
        #expect(s.fromApp(2, Self.poison).count == 1)
        guard case .upstream(let good)? = s.fromApp(1, Self.good).first, let id = good["id"] else {
            Issue.record("the good one was not sent")
            return
        }
        let next: JSONValue = ["type": "next", "id": id, "payload": ["data": ["a": 1]]]
        #expect(s.fromUpstream(next) == [.app(1, next.setting("id", to: "1"))])
        _ = s.lost(reason: "gone", closedRightAfterOpen: nil)
        for open in 1...3 {
            let sent = s.opened()
            // ready, the good one (it worked), then the poison one.
            let first = if case .upstream(let m)? = sent.dropFirst().first { m["payload"]?["query"]?.stringValue } else { String?.none }
            #expect(sent.count == 3 && first == "subscription { a }", "open \(open): \(sent)")
            let told = s.lost(reason: "gone", closedRightAfterOpen: "closed by the server: 4400 bad")
            #expect(s.culprit?.contains("operationName") == true, "open \(open): \(String(describing: s.culprit))")
            #expect(told.allSatisfy { if case .app(2, _) = $0 { true } else { false } })
        }
        // Set aside: the poison one; the good one flows on.
        #expect(s.liveSubscriptions.filter { $0.setAside != nil }.map { $0.holders.first?.app } == [2])
        #expect(s.opened().count == 2)
    }

    @Test func aStableOpenClearsTheCount() {
        var s = GraphQL(codec: GraphQLTransportWS(), limits: AppProtocolLimits(setAsideAfter: 2))
        _ = s.opened()
        _ = s.fromApp(1, Self.poison)
        for (early, expectSetAside) in [(true, false), (false, false), (true, false), (true, true)] {
            _ = s.opened()
            _ = s.lost(reason: "gone", closedRightAfterOpen: early ? "closed" : nil)
            #expect((s.liveSubscriptions.first?.setAside != nil) == expectSetAside, "early: \(early)")
        }
    }
}

/// After an open, the subscriptions that never worked go one at a time (issue 44, item 6).
@Suite struct RestoreOneAtATimeTests {
    static func subscribe(_ id: String, _ field: String) -> JSONValue {
        ["type": "subscribe", "id": .string(id), "payload": ["query": .string("subscription { \(field) }")]]
    }

    /// The upstream subscribes among `effects`, as their fields.
    static func sent(_ effects: [AppProtocolEffect]) -> [String] {
        effects.compactMap { if case .upstream(let m) = $0 { m["payload"]?["query"]?.stringValue?.split(separator: " ")[2].description } else { nil } }
    }

    @Test func eachGoesOnceTheOneBeforeItDeliversOrItsWaitPassesAndNewOnesWaitTheirTurn() throws {
        var s = GraphQL(codec: GraphQLTransportWS(), limits: AppProtocolLimits(setAsideAfter: 3))
        for (n, field) in ["a", "b", "c"].enumerated() { _ = s.fromApp(AppID(n + 1), Self.subscribe("1", field)) }
        _ = s.lost(reason: "gone", closedRightAfterOpen: nil)
        // (Each mutating call outside #expect, which may evaluate its expression more than once.)
        let opened = s.opened()
        #expect(Self.sent(opened) == ["a"])
        let first = try #require(s.restoreStep)
        // A new subscription meanwhile waits behind the restore.
        let d = s.fromApp(4, Self.subscribe("1", "d"))
        #expect(Self.sent(d) == [])
        // a delivers: b goes.
        let afterA = s.fromUpstream(["type": "next", "id": "4", "payload": [:]])
        #expect(Self.sent(afterA) == ["b"])
        // A stale wait changes nothing; b's wait passing sends c.
        let stale = s.confirmationTimedOut(step: first)
        #expect(stale == [])
        let second = try #require(s.restoreStep)
        let timedOut = s.confirmationTimedOut(step: second)
        #expect(Self.sent(timedOut) == ["c"])
        // c delivers: d; d delivers: the restore is over.
        let afterC = s.fromUpstream(["type": "next", "id": "6", "payload": [:]])
        #expect(Self.sent(afterC) == ["d"])
        #expect(s.restoreStep != nil)
        let afterD = s.fromUpstream(["type": "next", "id": "7", "payload": [:]])
        #expect(Self.sent(afterD) == [])
        #expect(s.restoreStep == nil)
        // Next open: a, c and d worked: at once; b never did (its wait passed): after them, alone.
        _ = s.lost(reason: "gone", closedRightAfterOpen: nil)
        let again = s.opened()
        #expect(Self.sent(again) == ["a", "c", "d", "b"])
        #expect(s.restoreStep != nil)
    }
}
