import Testing
import WSBridgeProtocol

@testable import WSBridgeCore

extension AppProtocolSession {
    /// What the upstream sent (one WebSocket message), routed as the daemon's layer routes it: the
    /// messages a scan can tell by the scan (each delivered as its bytes with the id replaced, then
    /// read back and written as the parse's effects are, to compare), the rest parsed. Returns the
    /// effects and how many messages the scan routed.
    mutating func upstreamByScan(_ text: String) -> (effects: [String], scanned: Int) {
        let bytes = Array(text.utf8)
        var out: [String] = []
        var offset = 0
        var scanned = 0
        reading: while offset < bytes.count {
            let scan = bytes.withUnsafeBytes { self.scan(upstream: UnsafeRawBufferPointer(rebasing: $0[offset...])) }
            switch scan {
            case .unsure:
                break reading
            case .nothing(let end):
                offset += end
            case .broadcast(let range):
                out.append("broadcast")
                offset += range.upperBound
                scanned += 1
            case .answer(let scannedID, _, let range), .event(let scannedID, let range):
                let at = scannedID.at
                guard let routed = bytes.withUnsafeBytes({ self.route(scanned: scan, in: UnsafeRawBufferPointer(rebasing: $0[offset...])) })
                else { break reading }
                let message = Array(bytes[(offset + range.lowerBound)..<(offset + range.upperBound)])
                let idAt = (at.lowerBound - range.lowerBound)..<(at.upperBound - range.lowerBound)
                /// The message as `app` gets it: under `as` (nil: the id it carries).
                func delivered(_ app: AppID, _ as: WireID?) -> String {
                    var copy = message
                    if let to = `as` { copy.replaceSubrange(idAt, with: Array(self.codec.scannedIDText(to).utf8)) }
                    guard case .success(let (views, used)) = self.codec.split(copy[...]), views.count == 1, used == copy.count else {
                        return "app \(app) unreadable \(String(decoding: copy, as: UTF8.self).debugDescription)"
                    }
                    return "app \(app) " + self.codec.wireText(views[0].view)
                }
                switch routed {
                case .call(let app, let appID):
                    out.append(delivered(app, appID))
                case .kept:
                    let id = self.keptRoute!.id
                    switch self.keptRoute!.route {
                    case .everyone: out.append("broadcast")
                    case .holders(let holders): out += holders.map { delivered($0.app, $0.appID == id ? nil : $0.appID) }
                    case .shared(let holders, let visible): out += holders.map { delivered($0.app, visible == id ? nil : visible) }
                    }
                }
                offset += range.upperBound
                scanned += 1
            }
        }
        if offset < bytes.count { out += self.upstreamOrError(String(decoding: bytes[offset...], as: UTF8.self)) }
        return (out, scanned)
    }

    /// What the upstream sent, parsed (`upstream`), or the syntax error.
    mutating func upstreamOrError(_ text: String) -> [String] {
        switch Array(text.utf8).withUnsafeBytes({ self.split(upstream: $0) }) {
        case .success(let messages): messages.flatMap { self.wire(self.fromUpstream($0.view)) }
        case .failure(let error): ["error \(error)"]
        }
    }

    /// `text` from the upstream both ways, on copies of this session: what the scan routes must
    /// be what the parse does, and leave the session as the parse does (the same text again gives
    /// the same); how many messages the scan routed.
    mutating func bothWays(_ text: String, again: Bool = true, sourceLocation: SourceLocation = #_sourceLocation) -> Int {
        var scanning = self
        let (scanned, count) = scanning.upstreamByScan(text)
        let parsed = self.upstreamOrError(text)
        #expect(scanned == parsed, "\(text.debugDescription)", sourceLocation: sourceLocation)
        if again {
            #expect(
                scanning.upstreamByScan(text).effects == self.upstreamOrError(text), "again: \(text.debugDescription)", sourceLocation: sourceLocation)
        }
        return count
    }
}

/// Issue 46: an upstream message routed by a scan of its bytes goes where the parse sends it,
/// under the ids the parse writes, and changes the session as the parse does, for every
/// protocol; what the scan cannot be sure of is left to the parse.
@Suite struct AppProtocolScanTests {
    @Test func natsMessagesOnASubscriptionsSidAreRoutedByTheScan() {
        var s = NATSTests().ready()
        _ = s.app(1, "SUB prices.btc s\r\n")
        _ = s.app(2, "SUB prices.btc 1\r\n")
        _ = s.app(3, "SUB prices.eth 9\r\n")
        // The first message of each subscription marks it working: the parse's.
        #expect(s.bothWays("MSG prices.btc 1 2\r\n42\r\n") == 0)
        #expect(s.bothWays("MSG prices.eth 2 1\r\n7\r\n") == 0)
        #expect(s.bothWays("MSG prices.btc 1 2\r\n43\r\n") == 1)
        #expect(s.bothWays("MSG prices.btc  1\treply.x  5\r\nhello\r\n") == 1)
        #expect(s.bothWays("HMSG prices.eth 2 12 14\r\nNATS/1.0\r\n\r\n{}\r\n") == 1)
        // Several in one WebSocket message, a PING among them: the scan up to it, the rest parsed.
        #expect(s.bothWays("MSG prices.btc 1 1\r\n1\r\nMSG prices.eth 2 1\r\n2\r\nPING\r\nMSG prices.btc 1 1\r\n3\r\n") == 2)
        // A reply to the daemon's inbox, a sid nobody holds, a size that is not the payload's,
        // a header size past the total: parsed.
        _ = s.app(4, "PUB svc.add my.reply 1\r\n1\r\n")
        #expect(s.bothWays("MSG \(NATSTests.inbox)1 0 1\r\n2\r\n") == 0)
        #expect(s.bothWays("MSG prices.btc 77 1\r\n2\r\n") == 0)
        #expect(s.bothWays("MSG prices.btc 1 3\r\n2\r\n") == 0)
        #expect(s.bothWays("HMSG prices.eth 2 20 14\r\nNATS/1.0\r\n\r\n{}\r\n") == 0)
    }

    @Test func aSubscriptionsRouteIsKeptUntilTheSessionChanges() {
        var s = NATSTests().ready()
        _ = s.app(1, "SUB a s\r\n")
        _ = s.upstream("MSG a 1 1\r\n1\r\n")
        let message = "MSG a 1 1\r\n2\r\n"
        /// The scan's routing on `s` itself (its kept route), against a parse on a copy.
        func routed(sourceLocation: SourceLocation = #_sourceLocation) -> [String] {
            var parsing = s
            let parsed = parsing.upstreamOrError(message)
            let (effects, count) = s.upstreamByScan(message)
            #expect(effects == parsed, sourceLocation: sourceLocation)
            #expect(count == 1, sourceLocation: sourceLocation)
            return effects
        }
        #expect(routed().count == 1)
        #expect(s.keptRoute != nil)
        #expect(routed().count == 1)
        // Another app joins, then the first leaves: the kept route is not taken again.
        _ = s.app(2, "SUB a t\r\n")
        #expect(routed().count == 2)
        _ = s.app(1, "UNSUB s\r\n")
        #expect(routed().count == 1)
        // The same bytes as another kind of id (an event's, JSON-RPC's) are found again too.
        var rpc = AppProtocolSession(codec: JSONRPC())
        _ = rpc.opened()
        _ = rpc.app(1, #"{"jsonrpc":"2.0","id":5,"method":"eth_subscribe","params":["newHeads"]}"#)
        _ = rpc.upstreamOrError(#"{"jsonrpc":"2.0","id":1,"result":"0x1"}"#)
        let event = #"{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","result":1}}"#
        _ = rpc.upstreamOrError(event)
        #expect(rpc.upstreamByScan(event).scanned == 1)
        #expect(rpc.upstreamByScan(#"{"jsonrpc":"2.0","id":"0x1","result":2}"#).effects == [])
    }

    @Test func natsScanWaitsForAMessageCutAcrossWebSocketMessages() {
        var s = NATSTests().ready()
        _ = s.app(1, "SUB a 5\r\n")
        #expect(s.bothWays("MSG a 1 1\r\n1\r\n") == 0)
        #expect(s.bothWays("MSG a 1 11\r\nhello", again: false) == 0)
        #expect(s.bothWays(" world\r\nMSG a 1 1\r\n2\r\n", again: false) == 0)
        #expect(s.bothWays("MSG a 1 1\r\n3\r\n") == 1)
    }

    @Test func stompMessagesAreRoutedByTheirSubscriptionHeader() {
        let stomp = STOMPTests()
        var s = stomp.ready()
        _ = s.app(1, stomp.subscribe("s", "/topic/a"))
        _ = s.app(2, stomp.subscribe("s", "/topic/a"))
        // An id with a colon and a line feed in it (escaped in the frame).
        _ = s.app(3, stomp.subscribe("a\\c\\nb", "/topic/b"))
        #expect(s.bothWays(stomp.message("1", #"{"n":1}"#)) == 0)
        #expect(s.bothWays(stomp.message("2", #"{"n":1}"#)) == 0)
        #expect(s.bothWays(stomp.message("1", #"{"n":2}"#)) == 1)
        // The app's id written escaped, as a MESSAGE's headers are.
        #expect(s.bothWays(stomp.message("2", "x")) == 1)
        // Without content-length (to the NUL), CRLF lines, heart-beats around and between frames.
        #expect(s.bothWays("\nMESSAGE\r\nsubscription:1\r\ndestination:/topic/a\r\n\r\nhi\0\n") == 1)
        #expect(s.bothWays(stomp.message("1", "a") + "\n" + stomp.message("2", "b") + "\r\n\n") == 2)
        #expect(s.bothWays("\n") == 0)
        // A body with a NUL inside, by its content-length.
        #expect(s.bothWays("MESSAGE\nsubscription:1\ncontent-length:3\n\na\0b\0") == 1)
        // Parsed: an escaped subscription header, two of them, a RECEIPT, an unknown subscription,
        // a content-length that does not end at a NUL.
        #expect(s.bothWays("MESSAGE\nsubscription:\\c1\n\nx\0") == 0)
        #expect(s.bothWays("MESSAGE\nsubscription:1\nsubscription:2\n\nx\0") == 0)
        #expect(s.bothWays("RECEIPT\nreceipt-id:77\n\n\0") == 0)
        #expect(s.bothWays(stomp.message("9", "x")) == 0)
        #expect(s.bothWays("MESSAGE\nsubscription:1\ncontent-length:1\n\nab\0") == 0)
    }

    @Test func jsonRPCEventsAndAnswersAreRoutedByTheScan() {
        var s = AppProtocolSession(codec: JSONRPC())
        _ = s.opened()
        _ = s.app(1, #"{"jsonrpc":"2.0","id":5,"method":"eth_subscribe","params":["newHeads"]}"#)
        // The subscribe's answer carries the server's id: parsed.
        #expect(s.bothWays(#"{"jsonrpc":"2.0","id":1,"result":"0xabc"}"#) == 0)
        _ = s.app(2, #"{"jsonrpc":"2.0","id":5,"method":"eth_subscribe","params":["newHeads"]}"#)
        let event = #"{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xabc","result":{"n":1}}}"#
        #expect(s.bothWays(event) == 1)
        // Calls from two apps on one id, each answer its own.
        _ = s.app(1, #"{"jsonrpc":"2.0","id":1,"method":"add","params":[1,2]}"#)
        _ = s.app(2, #"{"jsonrpc":"2.0","id":1,"method":"add","params":[3,4]}"#)
        // The call's id as a string, or with a leading zero, is another id: not the call's answer.
        #expect(s.bothWays(#"{"jsonrpc":"2.0","id":"3","result":7}"#) == 0)
        #expect(s.bothWays(#"{"jsonrpc":"2.0","id":03,"result":7}"#) == 0)
        #expect(s.bothWays(#"{"jsonrpc":"2.0","id":3,"result":7}"#) == 1)
        #expect(s.bothWays(#"{"id":2,"jsonrpc":"2.0","error":{"code":-1,"message":"no"}}"#) == 1)
        // A reconnect: the server's new id is the one on the wire, the apps keep the first.
        _ = s.lost(reason: "gone")
        _ = s.opened()
        #expect(s.bothWays(#"{"jsonrpc":"2.0","id":4,"result":"0xdef"}"#) == 0)
        let renamed = #"{"jsonrpc":"2.0","method":"eth_subscription","params":{"result":{"n":2},"subscription":"0xdef"}}"#
        #expect(s.bothWays(renamed) == 1)
        // A notification that is no subscription's, an id beside a method, an answer without a
        // result, an id that is null, what is no JSON-RPC: broadcasts, told by the scan.
        #expect(s.bothWays(#"{"jsonrpc":"2.0","method":"announce","params":{"x":1}}"#) == 1)
        #expect(s.bothWays(#"{"jsonrpc":"2.0","id":9,"method":"ask","params":{"subscription":"0xdef"}}"#) == 1)
        #expect(s.bothWays(#"{"jsonrpc":"2.0","id":3}"#) == 1)
        #expect(s.bothWays(#"{"id":null,"error":{"code":-32700}}"#) == 1)
        #expect(s.bothWays(#"{"method":"eth_subscription","params":["0xdef"]}"#) == 1)
        #expect(s.bothWays(#"{}"#) == 1)
        // Not an object, a name with an escape, bytes that are not JSON: parsed.
        #expect(s.bothWays(#"[{"jsonrpc":"2.0","id":3,"result":1}]"#) == 0)
        #expect(s.bothWays(#"{"i\u0064":3,"result":1}"#) == 0)
        #expect(s.bothWays(#"{"id":3,"result":1"#) == 0)
    }

    @Test func graphqlNextIsRoutedByTheScanAndCompleteParsed() {
        var s = AppProtocolSession(codec: GraphQLTransportWS())
        _ = s.upstream(#"{"type":"connection_ack"}"#)
        _ = s.opened()
        let q = #"{"query":"subscription { ticks }"}"#
        _ = s.app(1, #"{"type":"subscribe","id":"a","payload":\#(q)}"#)
        _ = s.app(2, #"{"type":"subscribe","id":"b","payload":\#(q)}"#)
        #expect(s.bothWays(#"{"type":"next","id":"1","payload":{"data":{"ticks":1}}}"#) == 0)
        #expect(s.bothWays(#"{"id":"1","type":"next","payload":{"data":{"ticks":2}}}"#) == 1)
        #expect(s.bothWays(#"{"type":"complete","id":"1"}"#) == 0)
        #expect(s.bothWays(#"{"type":"next","id":"1","payload":{"data":{"ticks":3}}}"#) == 0)
        // A query is a call under the daemon's id "2": its answer by that string, not the number.
        _ = s.app(1, #"{"type":"subscribe","id":"q","payload":{"query":"{ a }"}}"#)
        #expect(s.bothWays(#"{"type":"next","id":2,"payload":{"data":{"a":1}}}"#, again: false) == 0)
        #expect(s.bothWays(#"{"type":"next","id":"2","payload":{"data":{"a":1}}}"#) == 1)
    }

    @Test func socketIOAcksAreRoutedByTheScan() {
        var s = SocketIOTests().ready()
        _ = s.app(1, #"421["add",1,2]"#)
        _ = s.app(2, #"421["add",10,20]"#)
        _ = s.app(3, #"4212["add",0,0]"#)
        #expect(s.bothWays("432[30]") == 1)
        #expect(s.bothWays("431[3]") == 1)
        #expect(s.bothWays("433[0]") == 1)
        // Answered: the same ack again reaches nobody, both ways. A leading zero, a namespace,
        // an event: parsed.
        #expect(s.bothWays("4303[0]") == 0)
        #expect(s.bothWays(#"43/chat,1[0]"#) == 0)
        #expect(s.bothWays(#"42["tick",1]"#) == 0)
    }

    @Test func jsonAnswersSubscriptionsDataIdsAndMessagesWithoutAnIdByTheScan() throws {
        var s = AppProtocolSession(codec: JSONProtocol(idPath: "data.id"))
        _ = s.opened()
        _ = s.sticky(1, #"{"data":{"id":"s"},"type":"subscribe"}"#, key: "feed")
        _ = s.sticky(2, #"{"data":{"id":7},"type":"subscribe"}"#, key: "feed")
        #expect(s.bothWays(#"{"data":{"id":1},"ok":true}"#) == 0)
        #expect(s.bothWays(#"{"data":{"n":1,"id":1}}"#) == 1)
        _ = s.app(1, #"{"data":{"id":1},"type":"get"}"#)
        #expect(s.bothWays(#"{"data":{"id":2},"result":"r"}"#) == 1)
        // An id nobody holds is data, and a message without one: for everyone.
        #expect(s.bothWays(#"{"data":{"id":"BTC"},"price":1}"#) == 1)
        #expect(s.bothWays(#"{"price":1}"#) == 1)
        // With a `[[protocol.reply]]` nothing is scanned.
        let reply = JSONProtocol.Reply(when: Filter(parsing: "ping"), send: try ReplyTemplate(parsing: #"{"pong":1}"#))
        var replying = AppProtocolSession(codec: JSONProtocol(idPath: "id", replies: [reply]))
        _ = replying.opened()
        #expect(replying.bothWays(#"{"price":1}"#) == 0)
    }
}
