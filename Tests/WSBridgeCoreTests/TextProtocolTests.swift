import Testing
import WSBridgeProtocol

@testable import WSBridgeCore

/// The text protocols (issue 34): their messages split and viewed, written back byte for byte,
/// and two apps on the same ids at once, as wire text in and out.
extension ProtocolSession {
    /// The app's text as it would come through `send` (must be whole messages).
    mutating func app(_ app: AppID, _ text: String) -> [String] {
        guard case .success(let views) = self.parse(app: text) else {
            Issue.record("not a message: \(text.debugDescription)")
            return []
        }
        return views.flatMap { self.wire(self.fromApp(app, $0)) }
    }

    /// What the upstream sent, as one WebSocket message.
    mutating func upstream(_ text: String) -> [String] {
        let split = Array(text.utf8).withUnsafeBytes { self.split(upstream: $0) }
        guard case .success(let messages) = split else {
            Issue.record("not the protocol: \(text.debugDescription): \(split)")
            return []
        }
        return messages.flatMap { self.wire(self.fromUpstream($0.view)) }
    }

    /// Effects as text: `up TEXT`, `app N TEXT`, `broadcast`, `refuse …`.
    func wire(_ effects: [ProtocolEffect]) -> [String] {
        effects.map { effect in
            switch effect {
            case .upstream(let v): "up " + self.wireText(v)
            case .app(let app, let v): "app \(app) " + self.wireText(v)
            case .broadcast: "broadcast"
            case .refuse(let reason): "refuse " + reason
            case .ready: "ready"
            case .timing(let t): "timing send \(t.sendEvery ?? 0) \(t.text.debugDescription) deadline \(t.deadline ?? 0)"
            case .serverError(let text, let fatal): "error \(fatal ? "fatal " : "")\(text)"
            }
        }
    }
}

@Suite struct SocketIOTests {
    func ready() -> ProtocolSession {
        var s = ProtocolSession(codec: SocketIO())
        #expect(s.upstream(#"0{"sid":"e1","upgrades":[],"pingInterval":2000,"pingTimeout":1500,"maxPayload":1000000}"#) == ["timing send 0 \"\" deadline 3500"])
        // The link sent `40` and its ready gate saw the answer first; then it opens.
        #expect(s.upstream(#"40{"sid":"s1"}"#) == [])
        #expect(s.wire(s.opened()) == ["ready"])
        return s
    }

    @Test(arguments: [
        #"0{"sid":"x","pingInterval":25000,"pingTimeout":20000}"#, "2", "3", "2probe", #"42["tick",{"n":1}]"#, #"421["add",1,2]"#,
        #"42/chat,5["x"]"#, "431[3]", #"43/chat,12[{"ok":true}]"#, #"40{"sid":"s"}"#, "40/chat,", "41", #"44{"message":"not authorized"}"#,
    ])
    func everyPacketIsWrittenBackAsItCame(_ packet: String) throws {
        let codec = SocketIO()
        guard case .success(let (messages, consumed)) = codec.split(Array(packet.utf8)[...]), let view = messages.first?.view else {
            Issue.record("not read: \(packet)")
            return
        }
        #expect(consumed == packet.utf8.count)
        #expect(codec.wireText(view) == packet)
    }

    @Test func theViewNamesTheEventAndItsArguments() throws {
        guard case .success(let (messages, _)) = SocketIO().split(Array(#"42/chat,7["trade",{"px":1},2]"#.utf8)[...]) else { return }
        #expect(
            messages[0].view == (try JSONValue.parse(#"{"type":"event","namespace":"/chat","id":7,"event":"trade","args":[{"px":1},2]}"#)))
    }

    @Test func twoAppsEmittingWithAckIdOneGetTheirOwnAck() {
        var s = self.ready()
        #expect(s.app(1, #"421["add",1,2]"#) == [#"up 421["add",1,2]"#])
        #expect(s.app(2, #"421["add",10,20]"#) == [#"up 422["add",10,20]"#])
        #expect(s.upstream("432[30]") == ["app 2 431[30]"])
        #expect(s.upstream("431[3]") == ["app 1 431[3]"])
        // Events without an ack id are the server's, for everyone; an emit without one goes as it is.
        #expect(s.upstream(#"42["tick",1]"#) == ["broadcast"])
        #expect(s.app(1, #"42["join","room-1"]"#) == [#"up 42["join","room-1"]"#])
    }

    @Test func theDaemonAnswersTheServersPingAndAnAppsOwnHandshake() {
        var s = self.ready()
        #expect(s.upstream("2") == ["up 3"])
        #expect(s.app(1, "40") == [#"app 1 40{"sid":"s1"}"#])
        #expect(s.app(1, "41") == [])
        // The link lost with an emit in flight: its ack is an error, at once.
        _ = s.app(1, #"429["slow"]"#)
        #expect(s.wire(s.lost(reason: "gone")) == [#"app 1 439[{"error":"wsbridged: gone"}]"#])
    }

    @Test func aNamespaceTheServerRefusesOrDropsIsAnErrorThatEndsTheLink() {
        var s = self.ready()
        #expect(s.upstream(#"44{"message":"not authorized"}"#) == ["broadcast", "error fatal the server refused namespace / (44): not authorized"])
        #expect(s.upstream("41") == ["broadcast", "error fatal the server disconnected namespace / (41)"])
    }

    @Test(arguments: ["hello", "4", "49", #"42{"not":"an array"}"#, "451-[\"bin\",{\"_placeholder\":true,\"num\":0}]"])
    func whatIsNotSocketIOIsRefusedWithTheReason(_ text: String) {
        guard case .failure(let error) = ProtocolSession(codec: SocketIO()).parse(app: text) else {
            Issue.record("accepted \(text)")
            return
        }
        #expect(!error.description.isEmpty)
    }
}

@Suite struct STOMPTests {
    func ready() -> ProtocolSession {
        var s = ProtocolSession(codec: STOMP(heartBeat: (10_000, 10_000)))
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
        switch s.parse(app: text) {
        case .failure(let error):
            #expect(!error.description.isEmpty)
        case .success(let views):
            let out = views.flatMap { s.wire(s.fromApp(1, $0)) }
            #expect(!out.isEmpty && out.allSatisfy { $0.hasPrefix("refuse ") }, "\(out)")
        }
    }
}

@Suite struct NATSTests {
    static let inbox = "_INBOX.test."

    func ready() -> ProtocolSession {
        var s = ProtocolSession(codec: NATS(inbox: Self.inbox))
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
        guard case .failure(let error) = s.parse(app: "PUB a 10\r\nshort\r\n") else {
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
}
