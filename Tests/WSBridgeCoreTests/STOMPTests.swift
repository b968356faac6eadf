import Testing
import WSBridgeProtocol

@testable import WSBridgeCore

@Suite struct STOMPTests {
    func ready() -> AppProtocolSession {
        var s = AppProtocolSession(codec: STOMP(heartBeat: (10_000, 10_000)))
        #expect(s.upstream("CONNECTED\nversion:1.2\nheart-beat:5000,5000\nserver:RabbitMQ/3.10\n\n\0") == ["timing send 10000 \"\\n\" deadline 20000"])
        #expect(s.wire(s.opened()) == ["ready"])
        return s
    }

    func subscribe(_ id: String, _ destination: String, receipt: String? = nil) -> String {
        "SUBSCRIBE\nid:\(id)\ndestination:\(destination)\nack:auto\n" + (receipt.map { "receipt:\($0)\n" } ?? "") + "\n\0"
    }

    func message(_ subscription: String, _ body: String) -> String {
        "MESSAGE\nsubscription:\(subscription)\ndestination:/topic/a\nmessage-id:m-1\ncontent-length:\(body.utf8.count)\n\n\(body)\0"
    }

    @Test func framesAreSplitJoinedAndWrittenBackAsTheyCame() throws {
        let codec = STOMP()
        let two = "\n" + self.message("1", #"{"n":1}"#) + "\n\r\n" + "RECEIPT\nreceipt-id:77\n\n\0"
        guard case .success(let (messages, consumed)) = codec.split(Array(two.utf8)[...]) else {
            Issue.record("not read")
            return
        }
        #expect(consumed == two.utf8.count)
        #expect(messages.map(\.view["command"]) == ["MESSAGE", "RECEIPT"])
        #expect(messages[0].view["body"] == (try JSONValue.parse(#"{"n":1}"#)))
        #expect(codec.wireText(messages[0].view) == self.message("1", #"{"n":1}"#))
        // A body with a NUL inside, by its content-length; escaped header values.
        let odd = "MESSAGE\nsubscription:1\nx-note:a\\cb\\nc\\\\d\ncontent-length:3\n\na\0b\0"
        guard case .success(let (read, _)) = codec.split(Array(odd.utf8)[...]) else { return }
        #expect(read[0].view["headers"]?["x-note"] == "a:b\nc\\d")
        #expect(read[0].view["body"] == "a\0b")
        #expect(codec.wireText(read[0].view) == odd)
    }

    @Test func aFrameCutAcrossWebSocketMessagesIsJoined() {
        var s = self.ready()
        _ = s.app(1, self.subscribe("sub-0", "/topic/a"))
        let frame = self.message("1", "hello")
        let cut = frame.utf8.count / 2
        let (head, tail) = (String(decoding: Array(frame.utf8)[..<cut], as: UTF8.self), String(decoding: Array(frame.utf8)[cut...], as: UTF8.self))
        #expect(s.upstream(head) == [])
        #expect(s.upstream(tail) == ["app 1 " + self.message("sub-0", "hello")])
    }

    @Test func twoAppsOnSubZeroGetTheirOwnMessagesAndShareADestination() {
        var s = self.ready()
        #expect(s.app(1, self.subscribe("sub-0", "/topic/a")) == ["up " + self.subscribe("1", "/topic/a")])
        #expect(s.app(2, self.subscribe("sub-0", "/topic/b")) == ["up " + self.subscribe("2", "/topic/b")])
        #expect(s.upstream(self.message("2", "b1")) == ["app 2 " + self.message("sub-0", "b1")])
        // The same destination and headers: held twice, subscribed once.
        #expect(s.app(3, self.subscribe("s9", "/topic/a")) == [])
        #expect(s.upstream(self.message("1", "a1")) == ["app 1 " + self.message("sub-0", "a1"), "app 3 " + self.message("s9", "a1")])
        #expect(s.appLeft(1) == [])
        #expect(s.wire(s.appLeft(3)) == ["up UNSUBSCRIBE\nid:1\n\n\0"])
    }

    @Test func receiptsAreCallsAndASubscribesReceiptIsAnsweredHere() {
        var s = self.ready()
        #expect(
            s.app(1, self.subscribe("sub-0", "/topic/a", receipt: "r-1")) == [
                "up " + self.subscribe("1", "/topic/a"), "app 1 RECEIPT\nreceipt-id:r-1\n\n\0",
            ])
        #expect(s.app(1, "SEND\ndestination:/queue/q\nreceipt:r-2\n\nhi\0") == ["up SEND\ndestination:/queue/q\nreceipt:2\n\nhi\0"])
        #expect(s.app(2, "SEND\ndestination:/queue/q\nreceipt:r-2\n\nho\0") == ["up SEND\ndestination:/queue/q\nreceipt:3\n\nho\0"])
        #expect(s.upstream("RECEIPT\nreceipt-id:3\n\n\0") == ["app 2 RECEIPT\nreceipt-id:r-2\n\n\0"])
        // The link lost with app 1's call in flight: an ERROR with its receipt id, which a
        // waiting `request` takes for its answer.
        let lost = s.lost(reason: "gone")
        #expect(s.wire(lost) == ["app 1 ERROR\nreceipt-id:r-2\nmessage:wsbridged\\c gone\n\n\0"])
        if case .app(_, let error) = lost.first { #expect(s.answerIDs(in: error).map(\.id) == [WireID(.string("r-2"))]) }
        #expect(s.wire(s.opened()) == ["ready"] + ["up " + self.subscribe("4", "/topic/a")])
        // An app's CONNECT and DISCONNECT are answered here: the link is everyone's.
        #expect(s.app(2, "CONNECT\naccept-version:1.2\nhost:/\n\n\0").first?.hasPrefix("app 2 CONNECTED\nversion:1.2\nheart-beat:0,0") == true)
        #expect(s.app(2, "DISCONNECT\nreceipt:bye\n\n\0") == ["app 2 RECEIPT\nreceipt-id:bye\n\n\0"])
    }

    @Test func anErrorFrameIsForEveryoneAndEndsTheLink() {
        var s = self.ready()
        #expect(
            s.upstream("ERROR\nmessage:Duplicated subscription identifier\n\nsub-0\0") == [
                "broadcast", "error fatal Duplicated subscription identifier: sub-0",
            ])
    }

    @Test(arguments: ["send\n\n\0", "SUBSCRIBE\ndestination:/topic/a\n\n\0", "SEND\nno colon\n\n\0", "MESSAGE\nsubscription:1\n\n\0"])
    func whatIsNotAClientFrameIsRefused(_ text: String) {
        var s = self.ready()
        switch s.codec.parse(app: text) {
        case .failure(let error):
            #expect(!error.description.isEmpty)
        case .success(let views):
            let out = views.flatMap { s.wire(s.fromApp(1, $0)) }
            #expect(!out.isEmpty && out.allSatisfy { $0.hasPrefix("refuse ") }, "\(out)")
        }
    }
}
