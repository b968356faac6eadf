import Foundation
import Glibc
import Testing
import WSBridgeProtocol

/// The daemon's Unix socket with real clients: raw sockets, socat, Python, another uid.
@Suite struct LocalPlaneTests {
    @Test func helloThenMessagesAsOneJSONLineEach() async throws {
        let f = try await DaemonFixture()
        let c = try SocketClient(path: f.socket)
        let hello = await c.lines.wait(containing: "\"type\":\"hello\"").flatMap(c.json)
        #expect(hello?["protocol"] == 1)
        #expect(hello?["state"] == "open")
        #expect(hello?["subscribed"] == true)
        f.server.command("send {\"greeting\":\"hi\\nthere\"}")
        f.server.command("send plain text")
        #expect(await c.lines.wait(containing: "plain text") != nil)
        let messages = c.messages
        #expect(messages.count == 2)
        #expect(messages[0]["data"] == "{\"greeting\":\"hi\\nthere\"}")
        #expect(messages[0]["kind"] == "text")
        #expect(messages[1]["data"] == "plain text")
        #expect(messages[1]["seq"]!.intValue! == messages[0]["seq"]!.intValue! + 1)
        #expect(messages[0]["ts"]?.doubleValue ?? 0 > 1_700_000_000_000)
    }

    @Test func inlineJSONAndBinaryAsBase64() async throws {
        let f = try await DaemonFixture(extraConfig: "inline_json = true", serverKind: .python)
        let c = try await f.client()
        f.server.command("send {\"a\": [1, 2]}")
        f.server.command("send not json")
        f.server.command("oversize 5")  // 5 binary bytes "aaaaa"
        #expect(await c.lines.wait(containing: "\"kind\":\"binary\"") != nil)
        let m = c.messages
        #expect(m[0]["json"] == ["a": [1, 2]])
        #expect(m[1]["data"] == "not json")
        #expect(m[2]["data"] == "YWFhYWE=")
    }

    @Test func socatJustPrintsTheStream() async throws {
        let f = try await DaemonFixture()
        let socat = try ManagedProcess("/usr/bin/socat", ["-", "UNIX-CONNECT:\(f.socket)"], name: "socat")
        defer { socat.stop() }
        #expect(await socat.stdout.wait(containing: "\"type\":\"hello\"") != nil)
        f.server.command("send via socat")
        let line = await socat.stdout.wait(containing: "via socat")
        #expect(line.flatMap { try? JSONValue.parse($0) }?["type"] == "message")
        // socat can send requests too.
        socat.send("{\"id\":\"s1\",\"op\":\"status\"}")
        let reply = await socat.stdout.wait(containing: "\"id\":\"s1\"").flatMap { try? JSONValue.parse($0) }
        #expect(reply?.value(at: "result.state") == "open")
        #expect(reply?.value(at: "result.subscribers") == 1)
    }

    @Test func pythonClientSubscribesAndAsks() async throws {
        let f = try await DaemonFixture()
        let py = try ManagedProcess(Paths.python, ["-u", "\(Paths.root)/Tests/peers/subscriber.py", f.socket, "3"], name: "python-subscriber")
        defer { py.stop() }
        #expect(await py.stdout.wait(containing: "hello protocol=1") != nil, "\(py.stderr.text)")
        #expect(await py.stdout.wait(containing: "status state=open") != nil, "\(py.stderr.text)")
        f.server.command("burst 3")
        #expect(await py.stdout.wait(containing: "got 3 messages seq=1,2,3") != nil, "\(py.stdout.text) \(py.stderr.text)")
        #expect(await py.waitForExit() == 0)
    }

    @Test func twoHundredSubscribersReceiveTheSameSequence() async throws {
        let f = try await DaemonFixture()
        var clients: [SocketClient] = []
        for i in 0..<200 {
            clients.append(try await f.client(name: "sub\(i)"))
        }
        f.server.command("burst 500 100")
        for c in clients {
            #expect(await c.lines.wait(containing: "\"seq\":500,") != nil)
            let seqs = c.messages.compactMap { $0["seq"]?.intValue }
            #expect(seqs == Array(1...500))
        }
        let status = try await f.client(name: "status")
        status.send("{\"id\":\"st\",\"op\":\"status\"}")
        let s = await status.reply("st")
        #expect(s?.value(at: "result.subscribers") == 201)
        #expect(s?.value(at: "result.drops") == 0)
    }

    @Test func aStalledSubscriberNeitherSlowsNorCostsTheOthers() async throws {
        // The stalled client's socket buffer small (8 KiB in the kernel), so that the sums below hold.
        let f = try await DaemonFixture(extraConfig: "subscriber_queue = 2500\nsend_buffer_bytes = 4096")
        let stalled = try SocketClient(path: f.socket, reading: false, name: "stalled")
        var readers: [SocketClient] = []
        for i in 0..<9 { readers.append(try await f.client(name: "reader\(i)")) }
        // Paced so that readers keep up, and far more than the stalled client's queue, socket
        // buffer and NIO's high watermark hold.
        let total = 6000
        f.server.command("ticker 2000 1000 \(total)")
        // The ticker's own pace depends on the machine's load; wait for it to finish.
        #expect(await f.server.event("ticker done", timeout: .seconds(180)) != nil)
        for r in readers {
            #expect(await r.lines.wait(timeout: .seconds(60), containing: "\"seq\":\(total),") != nil)
            #expect(r.messages.compactMap { $0["seq"]?.intValue } == Array(1...total))
            #expect(!r.lines.text.contains("\"type\":\"dropped\""))
        }
        // The stalled one lost its oldest messages and is told so, then resumes in order.
        stalled.startReading()
        let dropped = await stalled.lines.wait(containing: "\"type\":\"dropped\"").flatMap(stalled.json)
        #expect(dropped != nil)
        #expect(await stalled.lines.wait(containing: "\"seq\":\(total),") != nil)
        let seqs = stalled.messages.compactMap { $0["seq"]?.intValue }
        #expect(seqs == seqs.sorted())
        #expect(seqs.count < total)
        if let d = dropped, let count = d["count"]?.intValue, let from = d["from"]?.intValue, let to = d["to"]?.intValue {
            #expect(count == to - from + 1)
            #expect(!seqs.contains(from) && !seqs.contains(to))
            #expect(seqs.count + count == total)
        }
    }

    @Test func queuedSendsSurviveAnUpstreamRestartInOrder() async throws {
        let f = try await DaemonFixture()
        let c = try await f.client()
        c.send("{\"id\":\"u1\",\"op\":\"unsubscribe\"}")
        _ = await c.reply("u1")
        f.server.process.stop()
        _ = await f.server.process.waitForExit()
        #expect(await f.daemon.awaitLink(.backingOff))
        for i in 1...20 {
            c.send("{\"id\":\"q\(i)\",\"op\":\"send\",\"text\":\"queued \(i)\"}")
            let r = await c.reply("q\(i)")
            #expect(r?.value(at: "result.status") == "queued", "\(r?.serialized ?? "no reply")")
        }
        // The upstream comes back on the same port.
        let restarted = try await UpstreamServer(.nio, arguments: ["--port", "\(f.serverPort)"])
        for i in 1...20 {
            #expect(await restarted.event("message queued \(i)") != nil)
        }
        let received = restarted.process.stdout.lines.filter { $0.hasPrefix("message queued ") }
        #expect(received == (1...20).map { "message queued \($0)" })
    }

    @Test func aFullQueueIsAnErrorNotASilentDrop() async throws {
        let f = try await DaemonFixture(extraConfig: "[queue]\nmax_messages = 2")
        let c = try await f.client()
        c.send("{\"id\":\"close\",\"op\":\"close\"}")
        _ = await c.reply("close")
        #expect(await f.daemon.awaitLink(.idle))
        for i in 1...2 {
            c.send("{\"id\":\"s\(i)\",\"op\":\"send\",\"text\":\"m\(i)\"}")
            #expect(await c.reply("s\(i)")?.value(at: "result.status") == "queued")
        }
        c.send("{\"id\":\"s3\",\"op\":\"send\",\"text\":\"m3\"}")
        let full = await c.reply("s3")
        #expect(full?.value(at: "error.code") == "queue_full")
        #expect(full?.value(at: "error.message")?.stringValue?.contains("queue.max_messages") == true)
        // connect flushes the two queued ones, in order.
        c.send("{\"id\":\"c\",\"op\":\"connect\"}")
        #expect(await f.server.event("message m1") != nil)
        #expect(await f.server.event("message m2") != nil)
    }

    @Test func everyBadInputGetsAClearErrorAndTheConnectionStaysUsable() async throws {
        let f = try await DaemonFixture(extraConfig: "max_line = 2048")
        let c = try await f.client()
        let other = try await f.client(name: "bystander")
        c.sendRaw(Array("not json\n".utf8))
        c.sendRaw([0x7B, 0xFF, 0xFE, 0x7D, 0x0A])
        c.sendRaw(Array((String(repeating: "x", count: 5000) + "\n").utf8))
        c.send("{\"id\":\"e1\",\"op\":\"fly\"}")
        c.send("{\"id\":\"e2\"}")
        c.send("{\"id\":\"e3\",\"op\":\"send\"}")
        c.send("{\"id\":\"e4\",\"op\":\"close\",\"code\":\"x\"}")
        c.send("{\"id\":\"e5\",\"op\":\"status\",\"v\":9}")
        c.send("[1,2]")
        c.send("{\"id\":\"ok\",\"op\":\"status\"}")
        #expect(await c.reply("ok")?["ok"] == true)
        let errors = c.lines.lines.compactMap { try? JSONValue.parse($0) }.filter { $0["ok"] == false }
        let codes = errors.compactMap { $0.value(at: "error.code")?.stringValue }
        #expect(
            codes == [
                "invalid_json", "invalid_utf8", "line_too_long", "unknown_op", "missing_field", "missing_field", "wrong_type", "bad_version", "not_an_object",
            ])
        for e in errors {
            #expect((e.value(at: "error.message")?.stringValue?.count ?? 0) > 20)
        }
        #expect(errors[3]["id"] == "e1")
        // The bystander never noticed, and the daemon still serves everyone.
        f.server.command("send still fine")
        #expect(await other.lines.wait(containing: "still fine") != nil)
        #expect(await c.lines.wait(containing: "still fine") != nil)
        #expect(!other.lines.text.contains("\"ok\":false"))
    }

    @Test func requestReturnsTheMatchingAnswerOrTimesOut() async throws {
        let f = try await DaemonFixture()
        let c = try await f.client()
        // The test server echoes: the echo of our request is its answer.
        c.send(#"{"id":"r1","op":"request","text":"{\"rid\":7,\"q\":\"price\"}","match":{"field":"rid","equals":7},"timeout":5}"#)
        let answer = await c.reply("r1")
        #expect(answer?.value(at: "result.json.q") == "price")
        c.send(#"{"id":"r2","op":"request","text":"{\"rid\":8}","match":{"field":"rid","equals":99},"timeout":0.3}"#)
        let timeout = await c.reply("r2")
        #expect(timeout?.value(at: "error.code") == "timeout")
        // Without a protocol, the daemon cannot tell what answers: the request must say.
        c.send(#"{"id":"nomatch","op":"request","text":"{\"rid\":9}"}"#)
        let unmatched = await c.reply("nomatch")
        #expect(unmatched?.value(at: "error.code") == "missing_field")
        #expect(unmatched?.value(at: "error.message")?.stringValue?.contains("upstream.protocol = \"raw\"") == true, "\(String(describing: unmatched))")

        // The link closed: answered at once (the timeout is 60 s), and nothing is queued.
        c.send(#"{"id":"x","op":"close"}"#)
        _ = await c.reply("x")
        #expect(await c.lines.wait(containing: "\"state\":\"idle\"") != nil)
        let mark = f.server.mark
        c.send(#"{"id":"r3","op":"request","text":"{\"rid\":9}","match":{"field":"rid","equals":9},"timeout":60}"#)
        let down = await c.reply("r3", timeout: .seconds(10))
        #expect(down?.value(at: "error.code") == "not_connected")
        #expect(down?.value(at: "error.message")?.stringValue?.contains("the upstream link is idle, so the request was not sent") == true)
        c.send(#"{"id":"st","op":"status"}"#)
        #expect(await c.reply("st")?.value(at: "result.queue.messages") == 0)
        c.send(#"{"id":"c","op":"connect"}"#)
        _ = await c.reply("c")
        c.send(#"{"id":"s","op":"send","text":"after"}"#)
        #expect(await f.server.event("message after", from: mark) != nil)
        #expect(f.server.process.stdout.lines.contains { $0.contains("\"rid\":9") } == false)
    }

    /// A request in flight when the link drops is answered `link_lost` at once, not at its
    /// timeout (60 s, past this test's waits).
    @Test func aRequestInFlightWhenTheLinkDropsIsAnsweredAtOnce() async throws {
        let f = try await DaemonFixture(serverArguments: ["--no-echo"])
        let c = try await f.client()
        c.send(#"{"id":"r","op":"request","text":"{\"rid\":1}","match":{"field":"rid","equals":1},"timeout":60}"#)
        #expect(await f.server.event("message {\"rid\":1}") != nil)
        let mark = c.lines.count
        f.server.command("drop")
        let lost = await c.reply("r", timeout: .seconds(20))
        #expect(lost?.value(at: "error.code") == "link_lost", "\(String(describing: lost))")
        #expect(lost?.value(at: "error.message")?.stringValue?.contains("before the answer came") == true)
        // The next request, once open again, waits for its own answer as before.
        #expect(await c.lines.wait(from: mark, containing: "\"type\":\"state\",\"state\":\"open\"") != nil)
        c.send(#"{"id":"s","op":"status"}"#)
        #expect(await c.reply("s")?.value(at: "result.state") == "open")
    }

    @Test func subscribeWithFilterAndSinceReportsGaps() async throws {
        let f = try await DaemonFixture(extraConfig: "replay = 5")
        let c = try await f.client()
        f.server.command("burst 10")
        #expect(await c.lines.wait(containing: "\"seq\":10,") != nil)
        let late = try await f.client(name: "late")
        late.send("{\"id\":\"sub\",\"op\":\"subscribe\",\"since\":2}")
        #expect(await late.reply("sub")?["ok"] == true)
        let gap = await late.lines.wait(containing: "\"type\":\"gap\"").flatMap(late.json)
        #expect(gap?["from"] == 3)
        #expect(gap?["to"] == 5)
        #expect(await late.lines.wait(containing: "\"seq\":10,") != nil)
        #expect(late.messages.compactMap { $0["seq"]?.intValue } == [6, 7, 8, 9, 10])

        let filtered = try await f.client(name: "filtered")
        filtered.send("{\"id\":\"f\",\"op\":\"subscribe\",\"filter\":{\"field\":\"n\",\"equals\":12}}")
        _ = await filtered.reply("f")
        f.server.command("burst 3")
        #expect(await c.lines.wait(containing: "\"seq\":13,") != nil)
        #expect(await filtered.lines.wait(containing: "\"seq\":12,") != nil)
        #expect(filtered.messages.compactMap { $0["seq"]?.intValue } == [12])
    }

    @Test func stateChangesArriveAsStateLines() async throws {
        let f = try await DaemonFixture()
        let c = try await f.client()
        c.send("{\"id\":\"x\",\"op\":\"close\",\"code\":4001,\"reason\":\"maintenance\"}")
        // Who closed: the user, though the server's echoed close frame ended the connection.
        let idle = await c.lines.wait(containing: "\"state\":\"idle\"")
        #expect(idle?.contains(#"closed by user (code 4001, \"maintenance\")"#) == true, "\(idle ?? "no idle line")")
        c.send("{\"id\":\"st\",\"op\":\"status\"}")
        let s = await c.reply("st")
        #expect(s?.value(at: "result.last_close.code") == 4001)
        #expect(s?.value(at: "result.last_close.by") == "user")
        // (From a mark: the hello line names the state too.)
        let connectMark = c.lines.count
        c.send("{\"id\":\"c\",\"op\":\"connect\"}")
        #expect(await c.lines.wait(from: connectMark, containing: "\"type\":\"state\",\"state\":\"open\"") != nil)
        let mark = c.lines.count
        c.send("{\"id\":\"rc\",\"op\":\"reconnect\"}")
        let connecting = await c.lines.wait(from: mark, containing: "\"state\":\"connecting\"")
        #expect(connecting?.contains("closed by user (code 1000") == true, "\(c.lines.lines.suffix(6))")
        #expect(await c.lines.wait(from: mark, containing: "\"type\":\"state\",\"state\":\"open\"") != nil)
        c.send("{\"id\":\"st2\",\"op\":\"status\"}")
        #expect(await c.reply("st2")?.value(at: "result.last_close.by") == "user")
    }
}
