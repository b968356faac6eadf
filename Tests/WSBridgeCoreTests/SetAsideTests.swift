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
