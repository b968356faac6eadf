import Testing
import WSBridgeProtocol

@testable import WSBridgeCore

@Suite struct SocketIOTests {
    func ready() -> AppProtocolSession {
        var s = AppProtocolSession(codec: SocketIO())
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

    /// `socket.emit("join", room, ack)` made sticky: acknowledged once to each holder, under its
    /// own id; sent again on every open, the acks of those sends for no app; held until its
    /// holders let go (issue 44: its ack ended it, and the room was lost at the next open).
    @Test func aStickyEmitWithAnAckIdIsAcknowledgedOnceAndSentAgainOnEveryOpen() {
        var s = self.ready()
        #expect(s.sticky(1, #"421["join","room"]"#, key: "room") == [#"up 421["join","room"]"#])
        #expect(s.upstream("431[]") == ["app 1 431[]"])
        // A second holder: its ack at once, nothing sent.
        #expect(s.sticky(2, #"427["join","room"]"#, key: "room") == ["app 2 437[]"])
        #expect(s.stickyHolders("room") == 2)
        for _ in 1...3 {
            _ = s.lost(reason: "gone")
            #expect(s.upstream(#"0{"sid":"e2","upgrades":[],"pingInterval":2000,"pingTimeout":1500,"maxPayload":1000000}"#).count == 1)
            #expect(s.upstream(#"40{"sid":"s2"}"#) == [])
            let sent = s.wire(s.opened())
            #expect(sent.count == 2 && sent[0] == "ready" && sent[1].hasPrefix("up 42") && sent[1].hasSuffix(#"["join","room"]"#), "\(sent)")
            let ackID = sent[1].dropFirst("up 42".count).prefix { $0.isNumber }
            #expect(s.upstream("43\(ackID)[]") == [])
        }
        #expect(s.stickyRelease(1, key: "room") != nil && s.stickyHolders("room") == 1)
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
        guard case .failure(let error) = SocketIO().parse(app: text) else {
            Issue.record("accepted \(text)")
            return
        }
        #expect(!error.description.isEmpty)
    }
}
