import Foundation
import Testing
import WSBridgeCore
import WSBridgeProtocol

/// `upstream.protocol = "socketio"` against python-socketio 5 on aiohttp (Tests/peers/socketio_peer.py).
@Suite(.serialized) struct SocketIOProtocolTests {
    static func peer(port: Int = 0, _ arguments: [String] = []) async throws -> (ManagedProcess, Int) {
        try await pythonPeer("socketio_peer.py", port: port, arguments)
    }

    static func url(_ port: Int) -> String { "ws://127.0.0.1:\(port)/socket.io/?EIO=4&transport=websocket" }

    static func ticks(_ texts: [String]) -> [Int] {
        texts.compactMap { text -> Int? in
            guard text.hasPrefix("42"), case .array(let items)? = try? JSONValue.parse(String(text.dropFirst(2))), items.count == 2, items[0] == "tick"
            else { return nil }
            return items[1]["n"]?.intValue
        }
    }

    @Test func twoAppsOnAckIdOneGetTheirOwnAcksAndTheirRoomSurvivesServerRestarts() async throws {
        let dir = try TemporaryDirectory()
        var (peer, port) = try await Self.peer()
        defer { peer.stop() }
        let (daemon, socket) = try await protocolDaemon(dir, url: Self.url(port), protocol: "socketio")
        defer { daemon.stop() }
        let a = try await TextApp.connect(socket, "a", of: daemon)
        let b = try await TextApp.connect(socket, "b", of: daemon)
        // Both emit with ack id 1, five rounds: each gets its own sum under its own id.
        for round in 0..<5 {
            a.send(#"421["add",10,\#(round)]"#, request: "a\(round)")
            b.send(#"421["add",1000,\#(round)]"#, request: "b\(round)")
            #expect(await a.wait { $0 == "431[\(10 + round)]" } != nil, "\(a.client.lines.text)")
            #expect(await b.wait { $0 == "431[\(1000 + round)]" } != nil, "\(b.client.lines.text)")
        }
        #expect(!a.texts().contains { $0.hasPrefix("431[100") } && !b.texts().contains { $0 == "431[10]" })
        // `request` without match: answered by the ack with its id.
        let answer = await a.request(#"427["add",2,3]"#, id: "r")
        #expect(answer?.value(at: "result.json.args") == [5], "\(String(describing: answer))")
        #expect(answer?.value(at: "result.json.id") == 7)

        // A room is the server's own event: both apps keep it with the same sticky send, which
        // goes upstream once; both get its ticks.
        for (app, name) in [(a, "a"), (b, "b")] {
            app.send(#"42["join","room-a"]"#, request: "j\(name)", sticky: "room-a", leave: #"42["leave","room-a"]"#)
            #expect(await app.client.reply("j\(name)")?["ok"] == true)
        }
        #expect(await peer.stdout.wait { $0 == "members room-a 1" } != nil)
        for app in [a, b] { #expect(await app.wait { $0.hasPrefix(#"42["tick""#) } != nil) }
        #expect(peer.stdout.lines.filter { $0 == "join room-a" }.count == 1)
        // Filters read the view: {"type":"event","namespace":"/","event":"tick","args":[{…}]}.
        let watcher = try await TextApp.connect(socket, "watcher", of: daemon)
        watcher.client.send(#"{"id":"f","op":"subscribe","filter":{"field":"event","equals":"tick"}}"#)
        #expect(await watcher.client.reply("f")?["ok"] == true)
        let seen = await watcher.client.lines.wait { $0.contains(#""type":"message""#) }
        #expect(seen?.contains(#"42[\"tick\""#) == true, "\(String(describing: seen))")
        watcher.close()

        // The server restarts 20 times: the room is joined again on every open, ticks flow, and
        // the apps did nothing.
        for restart in 1...20 {
            peer.stop()
            _ = await peer.waitForExit()
            let marks = (a.mark, b.mark)
            (peer, _) = try await Self.peer(port: port)
            #expect(await peer.stdout.wait { $0 == "join room-a" } != nil, "restart \(restart): \(daemon.stderr.text.suffix(2000))")
            for (app, mark) in [(a, marks.0), (b, marks.1)] {
                #expect(await app.wait(from: mark) { $0.hasPrefix(#"42["tick""#) } != nil, "restart \(restart)")
            }
        }
        for (name, app) in [("a", a), ("b", b)] {
            let numbers = Self.ticks(app.texts())
            let (lost, duplicated) = lostAndDuplicated(numbers)
            print("socketio 20 restarts: \(name): \(numbers.count) ticks, \(lost) lost, \(duplicated) duplicated within connections")
            #expect(lost == 0 && duplicated == 0)
        }
        // The first holder leaves: still joined; the last: the server sees the leave.
        a.close()
        let mark = b.mark
        #expect(await b.wait(from: mark) { $0.hasPrefix(#"42["tick""#) } != nil)
        #expect(!peer.stdout.lines.contains("leave room-a"))
        b.close()
        #expect(await peer.stdout.wait { $0 == "leave room-a" } != nil, "\(peer.stdout.text)")
    }

    /// A sticky emit with an ack id (`socket.emit("join", room, ack)` writes `421["join",…]`) is
    /// held as the other sticky sends are: acknowledged once to each app under its own id, joined
    /// again after every server restart, the acks of those re-sends going to no app (issue 44: it
    /// was never sent again, the room silently lost).
    @Test func aStickyEmitWithAnAckIdKeepsItsRoomAcrossServerRestarts() async throws {
        let dir = try TemporaryDirectory()
        var (peer, port) = try await Self.peer()
        defer { peer.stop() }
        let (daemon, socket) = try await protocolDaemon(dir, url: Self.url(port), protocol: "socketio")
        defer { daemon.stop() }
        let a = try await TextApp.connect(socket, "a", of: daemon)
        let b = try await TextApp.connect(socket, "b", of: daemon)
        a.send(#"421["join","room-b"]"#, request: "ja", sticky: "room-b")
        #expect(await a.client.reply("ja")?["ok"] == true)
        #expect(await a.wait { $0.hasPrefix("431[") } != nil, "\(a.client.lines.text)")
        // A second holder, with its own ack id: acknowledged at once, not sent again.
        b.send(#"424["join","room-b"]"#, request: "jb", sticky: "room-b")
        #expect(await b.client.reply("jb")?["ok"] == true)
        #expect(await b.wait { $0.hasPrefix("434[") } != nil, "\(b.client.lines.text)")
        #expect(await a.wait { $0.hasPrefix(#"42["tick",{"room":"room-b""#) } != nil)
        #expect(peer.stdout.lines.filter { $0 == "join room-b" }.count == 1)
        for restart in 1...5 {
            peer.stop()
            _ = await peer.waitForExit()
            let marks = (a.mark, b.mark)
            (peer, _) = try await Self.peer(port: port)
            #expect(await peer.stdout.wait { $0 == "join room-b" } != nil, "restart \(restart): \(daemon.stderr.text.suffix(2000))")
            for (app, mark) in [(a, marks.0), (b, marks.1)] {
                #expect(await app.wait(from: mark) { $0.hasPrefix(#"42["tick",{"room":"room-b""#) } != nil, "restart \(restart)")
            }
        }
        // One acknowledgement each, under the app's own id: the re-sends' went to no app.
        #expect(a.texts().filter { $0.hasPrefix("43") }.map { $0.prefix(4) } == ["431["], "\(a.texts())")
        #expect(b.texts().filter { $0.hasPrefix("43") }.map { $0.prefix(4) } == ["434["], "\(b.texts())")
    }

    @Test func theLinkIdlesPastThreeTimesTheServersPingDeadline() async throws {
        let dir = try TemporaryDirectory()
        // pingInterval + pingTimeout = 1.5 s (the open packet gives the interval in whole
        // seconds): the server drops a client that misses one answer.
        let (peer, port) = try await Self.peer(port: 0, ["--ping-interval", "1", "--ping-timeout", "0.5"])
        defer { peer.stop() }
        let (daemon, socket) = try await protocolDaemon(dir, url: Self.url(port), protocol: "socketio")
        defer { daemon.stop() }
        // Five pongs: 5 s on one connection, past 3 × the 1.5 s deadline, nothing from apps.
        let pongs = await peer.stdout.wait(count: 5, timeout: .seconds(30)) { $0 == "pong" }
        #expect(pongs.count == 5)
        #expect(
            peer.stdout.lines.filter { $0.hasPrefix("connected ") }.count == 1 && !peer.stdout.lines.contains { $0.hasPrefix("disconnected") },
            "\(daemon.stderr.text.suffix(3000))")
        let app = try await TextApp.connect(socket, "a", of: daemon)
        #expect(await app.status()?.value(at: "result.reconnects") == 0)
        // An app's own handshake and pings are answered here, never forwarded.
        app.send("40", request: "h")
        #expect(await app.wait { $0.hasPrefix(#"40{"sid":"#) } != nil)
        #expect(peer.stdout.lines.filter { $0.hasPrefix("connected ") }.count == 1)
        // A server that stops pinging (frozen: its socket stays open, the WebSocket heartbeat's
        // deadline is far off): the daemon drops the link once the server's own deadline passed.
        let mark = app.mark
        peer.signal(SIGSTOP)
        defer { peer.signal(SIGCONT) }
        let down = await app.client.lines.wait(from: mark) { $0.contains(#""type":"state""#) && !$0.contains(#""state":"open""#) }
        #expect(down?.contains("past the keepalive deadline the server set") == true, "\(String(describing: down))")
    }

    @Test func anEmitInFlightWhenTheLinkDropsGetsLinkLostAtOnce() async throws {
        let dir = try TemporaryDirectory()
        let (peer, port) = try await Self.peer()
        defer { peer.stop() }
        let (daemon, socket) = try await protocolDaemon(dir, url: Self.url(port), protocol: "socketio")
        defer { daemon.stop() }
        let a = try await TextApp.connect(socket, "a", of: daemon)
        a.client.send(#"{"id":"slow","op":"request","text":"429[\"slow\",60]","timeout":120}"#)
        #expect(await peer.stdout.wait { $0 == "call slow" } != nil)
        peer.stop()
        let reply = await a.client.reply("slow")
        #expect(reply?.value(at: "error.code") == "link_lost", "\(String(describing: reply))")
    }

    @Test func aNamespaceTheServerRefusesIsInStatusAndTheLinkBacksOff() async throws {
        let dir = try TemporaryDirectory()
        let (peer, port) = try await Self.peer(port: 0, ["--token", "right"])
        defer { peer.stop() }
        let socket = dir.file("d.sock")
        let token = try dir.write("token", "wrong\n")
        let config = try writeDaemonConfig(
            dir, "wsbridged", url: Self.url(port), socket: socket, upstream: "protocol = \"socketio\"",
            extra: "[auth]\ntoken_file = \"\(token)\"\n[protocol]\nauth = '{\"token\":\"${token}\"}'")
        let daemon = try ManagedProcess.daemon(["--config", config])
        defer { daemon.stop() }
        guard await daemon.awaitReady() else { throw TestFailure("no socket: \(daemon.stderr.text)") }
        let app = try await TextApp.connect(socket, "a", of: daemon)
        let status = try await eventually("3 failed attempts", { await app.status() }, until: { $0?.value(at: "result.failed_attempts")?.intValue ?? 0 >= 3 })
        #expect(
            status?.value(at: "result.protocol.server_error")?.stringValue?.contains("refused namespace / (44): not authorized") == true,
            "\(String(describing: status))")
        #expect(status?.value(at: "result.last_error")?.stringValue?.contains("not authorized") == true)
        #expect(status?.value(at: "result.state") != "open")
    }
}
