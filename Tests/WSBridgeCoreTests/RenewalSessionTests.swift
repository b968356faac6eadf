import Testing
import WSBridgeProtocol

@testable import WSBridgeCore

/// A renewal's second session (`AppProtocolSession.forRenewal`): the same subscriptions with ids
/// of its own, apps' subscribes mirrored, the ids apps were given kept at the takeover.
@Suite struct RenewalSessionTests {
    static let half: UInt64 = 1 << 39

    func subscribe(_ id: Int, _ what: String) -> JSONValue {
        json(#"{"jsonrpc":"2.0","id":\#(id),"method":"eth_subscribe","params":["\#(what)"]}"#)
    }

    func event(_ subscription: String, _ n: Int) -> JSONValue {
        json(#"{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"\#(subscription)","result":{"n":\#(n)}}}"#)
    }

    @Test func theNewSessionRestoresWithItsOwnIdsAndAppsKeepTheirs() {
        var old = RPC(codec: JSONRPC())
        _ = old.opened()
        #expect(old.fromApp(1, self.subscribe(5, "newHeads")) == [.upstream(self.subscribe(1, "newHeads"))])
        #expect(old.fromUpstream(json(#"{"jsonrpc":"2.0","id":1,"result":"0xabc"}"#)) == [.app(1, json(#"{"jsonrpc":"2.0","id":5,"result":"0xabc"}"#))])
        // A call waiting on the old connection: the new session knows nothing of it.
        #expect(old.fromApp(2, json(#"{"jsonrpc":"2.0","id":9,"method":"add","params":[1,2]}"#)).count == 1)
        var new = old.forRenewal()
        #expect(new.callsWaiting == 0 && old.callsWaiting == 1)
        let first = Int(Self.half) + 1
        #expect(new.opened() == [.ready, .upstream(self.subscribe(first, "newHeads"))])
        // Its subscribe's answer is the daemon's business (the app has its answer); its events
        // carry the id the app was given.
        #expect(new.fromUpstream(json(#"{"jsonrpc":"2.0","id":\#(first),"result":"0xdef"}"#)) == [])
        #expect(new.fromUpstream(self.event("0xdef", 1)) == [.app(1, self.event("0xabc", 1))])
        #expect(old.fromUpstream(self.event("0xabc", 1)) == [.app(1, self.event("0xabc", 1))])
        // The call's answer comes on the old connection only.
        let answer = json(#"{"jsonrpc":"2.0","id":2,"result":3}"#)
        #expect(old.answersWaiting(answer) && !old.answersWaiting(self.event("0xabc", 2)))
        #expect(!new.answersWaiting(answer) && new.fromUpstream(answer) == [])

        // A subscribe during the overlap goes on both connections; the app is answered by the
        // old one; after the takeover the new one's events carry the old one's id.
        #expect(old.fromApp(2, self.subscribe(7, "logs")) == [.upstream(self.subscribe(3, "logs"))])
        #expect(new.mirror(fromApp: 2, self.subscribe(7, "logs")) == [.upstream(self.subscribe(first + 1, "logs"))])
        #expect(new.mirror(fromApp: 2, json(#"{"jsonrpc":"2.0","id":10,"method":"add","params":[1,2]}"#)) == [], "calls are the current session's")
        #expect(old.fromUpstream(json(#"{"jsonrpc":"2.0","id":3,"result":"0x111"}"#)) == [.app(2, json(#"{"jsonrpc":"2.0","id":7,"result":"0x111"}"#))])
        #expect(new.fromUpstream(json(#"{"jsonrpc":"2.0","id":\#(first + 1),"result":"0x222"}"#)) == [])
        new.tookOver(from: old)
        #expect(new.fromUpstream(self.event("0x222", 1)) == [.app(2, self.event("0x111", 1))])
        // The app's end names the id it was given: ended with the new connection's id.
        #expect(
            new.fromApp(2, json(#"{"jsonrpc":"2.0","id":12,"method":"eth_unsubscribe","params":["0x111"]}"#)) == [
                .upstream(json(#"{"jsonrpc":"2.0","id":\#(first + 2),"method":"eth_unsubscribe","params":["0x222"]}"#))
            ])
    }

    @Test func eachRenewalNumbersFromTheOtherHalfOfItsRange() {
        let base: UInt64 = 3 << 40  // a pool's fourth connection
        var session = RPC(codec: JSONRPC())
        session.numberIDs(after: base)
        _ = session.opened()
        #expect(session.fromApp(1, self.subscribe(1, "a")) == [.upstream(self.subscribe(Int(base) + 1, "a"))])
        var second = session.forRenewal()
        #expect(second.opened() == [.ready, .upstream(self.subscribe(Int(base + Self.half) + 1, "a"))])
        var third = second.forRenewal()
        #expect(third.opened() == [.ready, .upstream(self.subscribe(Int(base) + 1, "a"))], "back to the first half, which the first connection left")
    }
}
