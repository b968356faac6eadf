import CWSBridgeLinux
import Foundation
import Testing
import WSBridgeProtocol

@testable import WSBridgeDaemon

/// Everything one local client can cause is bounded, and costs only that client.
@Suite struct LocalPlaneLimitsTests {
    /// Writes `bytes` without blocking; returns how many the socket took (0 once it is full).
    static func writeWithoutBlocking(_ fd: Int32, _ bytes: ArraySlice<UInt8>) -> Int {
        let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
        return max(n, 0)
    }

    @Test func aClientThatWritesRequestsButNeverReadsIsNoLongerRead() async throws {
        let f = try await DaemonFixture(extraConfig: "client_output_bytes = 65536")
        let flooder = try SocketClient(path: f.socket, reading: false, name: "flooder")
        let bystander = try await f.client(name: "bystander")
        // A request with a small reply: the daemon stops reading once the replies nobody reads
        // pass local.client_output_bytes, whatever their size.
        let request = Array(#"{"op":"unsubscribe"}"#.utf8) + [0x0A]
        let chunk = Array([[UInt8]](repeating: request, count: 4096).joined())
        var written = 0
        var rounds = 0
        var fullRounds = 0
        // Write until the daemon stops reading: three rounds in a row in which the socket takes
        // nothing, each after a status round trip through the daemon's event loop (which would
        // have read the flooder if it still did). Bounded: 64 MiB would mean it never stopped.
        while fullRounds < 3, written < 64 << 20 {
            var took = 0
            while case let n = Self.writeWithoutBlocking(flooder.fd, chunk[(written % chunk.count)...]), n > 0 {
                took += n
                written += n
            }
            rounds += 1
            bystander.send("{\"id\":\"b\(rounds)\",\"op\":\"status\"}")
            #expect(await bystander.reply("b\(rounds)")?["ok"] == true)
            fullRounds = took == 0 ? fullRounds + 1 : 0
        }
        #expect(fullRounds == 3, "the daemon kept reading \(written) bytes of requests nobody reads replies to")
        #expect(written < 4 << 20)
        // Once the flooder reads, the daemon reads its requests again and answers every one.
        flooder.startReading()
        let rest = request.count - written % request.count
        if rest < request.count { flooder.sendRaw(Array(request.suffix(rest))) }
        flooder.send(#"{"id":"last","op":"status"}"#)
        // Waited on while replies keep coming (a loaded machine answers tens of thousands more
        // slowly), not for a guessed time: it fails only if the replies stop before the last.
        var last: JSONValue?
        var seen = -1
        while last == nil {
            last = await flooder.reply("last", timeout: .seconds(20))
            let count = flooder.lines.lines.count
            guard last == nil, count > seen else { break }
            seen = count
        }
        #expect(last != nil, "the replies stopped after \(seen) lines")
        let replies = flooder.lines.lines.filter { $0.contains("\"type\":\"reply\"") }.count
        #expect(replies == (written + request.count - 1) / request.count + 1)
        #expect(!flooder.lines.text.contains("\"ok\":false"))
    }

    @Test func clientsBeyondMaxClientsAreToldWhyAndClosed() async throws {
        let f = try await DaemonFixture(extraConfig: "max_clients = 3")
        let a = try await f.client(name: "a")
        let others = [try await f.client(name: "b"), try await f.client(name: "c")]
        defer { for other in others { other.close() } }
        // socat exits when the daemon closes the connection.
        let refused = try ManagedProcess("/usr/bin/socat", ["-", "UNIX-CONNECT:\(f.socket)"], name: "refused")
        defer { refused.stop() }
        let line = await refused.stdout.wait(containing: "too_many_clients").flatMap { try? JSONValue.parse($0) }
        #expect(line?.value(at: "error.message")?.stringValue?.contains("local.max_clients = 3") == true)
        #expect(await refused.waitForExit() == 0)
        #expect(!refused.stdout.text.contains("\"type\":\"hello\""))
        // Status counts it (asked on a connection that has a place).
        others[0].send(#"{"id":"s","op":"status"}"#)
        #expect(await others[0].reply("s")?.value(at: "result.refused_clients")?.intValue == 1)
        // A place frees up: the next client is served.
        a.close()
        var served = false
        for _ in 0..<50 where !served {
            let next = try SocketClient(path: f.socket, name: "next")
            served = await next.lines.wait { $0.contains("\"type\":\"hello\"") || $0.contains("too_many_clients") }?.contains("hello") == true
        }
        #expect(served)
    }

    /// At the limit, the places local.reserved_clients keeps are for root (and the daemon's own
    /// user and access.write_*): other users are refused with a line naming the setting, and the
    /// operator's `wsbridgectl status` still gets in, until every place is taken.
    @Test func theReservedPlacesKeepTheOperatorFromBeingLockedOut() async throws {
        let f = try await DaemonFixture(extraConfig: "mode = \"0666\"\nmax_clients = 3\nreserved_clients = 1")
        // Two users without write access take the two ordinary places.
        var readers: [ManagedProcess] = []
        defer { for r in readers { r.stop() } }
        for _ in 0..<2 {
            let reader = try socatAsNobody(f.socket)
            readers.append(reader)
            #expect(await reader.stdout.wait(containing: "\"type\":\"hello\"") != nil)
        }
        // A third is refused, told which setting keeps the last place.
        let refused = try socatAsNobody(f.socket)
        defer { refused.stop() }
        let line = await refused.stdout.wait(containing: "too_many_clients").flatMap { try? JSONValue.parse($0) }
        #expect(
            line?.value(at: "error.message")?.stringValue?.contains("local.reserved_clients = 1 of local.max_clients = 3") == true, "\(refused.stdout.text)")
        #expect(await refused.waitForExit() == 0)
        // Root takes the reserved place: its status is answered, and counts the refusal.
        let operatorClient = try await f.client(name: "operator")
        operatorClient.send(#"{"id":"s","op":"status"}"#)
        let status = await operatorClient.reply("s")
        #expect(status?["ok"] == true && status?.value(at: "result.refused_clients")?.intValue == 1, "\(String(describing: status))")
        // Every place taken: root too is refused, and told to raise local.max_clients.
        let last = try ManagedProcess("/usr/bin/socat", ["-", "UNIX-CONNECT:\(f.socket)"], name: "last")
        defer { last.stop() }
        let full = await last.stdout.wait(containing: "too_many_clients").flatMap { try? JSONValue.parse($0) }
        #expect(full?.value(at: "error.message")?.stringValue?.contains("raise local.max_clients") == true, "\(last.stdout.text)")
    }

    @Test func pendingRequestsAreBoundedPerClientAndInAll() async throws {
        let f = try await DaemonFixture(extraConfig: "max_pending_requests = 2\nmax_pending_requests_total = 3")
        let c = try await f.client()
        let other = try await f.client(name: "other")
        func ask(_ client: SocketClient, _ id: String) {
            client.send(#"{"id":"\#(id)","op":"request","text":"q","match":{"field":"never"},"timeout":60}"#)
        }
        ask(c, "r1")
        ask(c, "r2")
        ask(c, "r3")
        let third = await c.reply("r3")
        #expect(third?.value(at: "error.code") == "too_many_requests")
        #expect(third?.value(at: "error.message")?.stringValue?.contains("local.max_pending_requests") == true)
        ask(other, "o1")
        ask(other, "o2")
        let overall = await other.reply("o2")
        #expect(overall?.value(at: "error.code") == "too_many_requests")
        #expect(overall?.value(at: "error.message")?.stringValue?.contains("local.max_pending_requests_total") == true)
        // A client that leaves frees its places: a request the echo server answers now goes through.
        let mark = f.daemon.eventMark
        c.close()
        // Gone when the daemon says one subscriber is left (STATUS= on every change).
        #expect(await f.daemon.awaitEvent(from: mark) { $0.hasPrefix("STATUS=") && $0.hasSuffix(" 1 subscriber") }, "\(f.daemon.events?.messages.text ?? "")")
        other.send(#"{"id":"echoed","op":"request","text":"{\"k\":1}","match":{"field":"k","equals":1},"timeout":20}"#)
        #expect(await other.reply("echoed")?["ok"] == true)
    }

    @Test func longFilterPathsAreRefusedAtSubscribe() async throws {
        let f = try await DaemonFixture()
        let c = try await f.client()
        let long = String(repeating: "a.", count: 300_000) + "a"
        c.send(#"{"id":"f","op":"subscribe","filter":{"field":"\#(long)"}}"#)
        let reply = await c.reply("f")
        #expect(reply?.value(at: "error.code") == "invalid_value")
        #expect(reply?.value(at: "error.message")?.stringValue?.contains("local.filter_max_bytes") == true)
        c.send(#"{"id":"d","op":"subscribe","filter":{"field":"\#(String(repeating: "a.", count: 20))a"}}"#)
        #expect(await c.reply("d")?.value(at: "error.message")?.stringValue?.contains("local.filter_max_depth") == true)
        // Still subscribed to everything.
        f.server.command("send after")
        #expect(await c.lines.wait(containing: "after") != nil)
    }

    @Test func theReplayRingIsBoundedByBytes() async throws {
        // 100 messages of about 1 KiB each; the ring holds 20 by count but only ~8 by bytes.
        let f = try await DaemonFixture(extraConfig: "replay = 20\nreplay_bytes = 10000")
        let c = try await f.client()
        f.server.command("burst 100 1000")
        #expect(await c.lines.wait(containing: "\"seq\":100,") != nil)
        let late = try await f.client(name: "late")
        late.send(#"{"id":"s","op":"subscribe","since":0}"#)
        let gap = await late.lines.wait(containing: "\"type\":\"gap\"").flatMap(late.json)
        #expect(await late.lines.wait { $0.contains("\"type\":\"message\",\"seq\":100,") } != nil)
        let replayed = late.messages.compactMap { $0["seq"]?.intValue }
        #expect(replayed.count >= 5 && replayed.count <= 10, "\(replayed)")
        #expect(replayed == Array((101 - replayed.count)...100))
        #expect(gap?["from"] == 1)
        #expect(gap?["to"]?.intValue == 100 - replayed.count)
        #expect(gap?["reason"] == "not_buffered")
        #expect(gap?["message"]?.stringValue?.contains("local.replay_bytes") == true)
    }

    /// A subscriber that drops messages lags: its socket's send buffer shrinks to
    /// `local.lagging_send_buffer_bytes` (fewer old lines wait where they can no longer be
    /// dropped for newer ones), and `clients` says so; once it read everything its buffer is the
    /// normal one again. A reader that keeps up never lags.
    @Test func aSubscriberThatDropsLagsUntilItCaughtUp() async throws {
        let f = try await DaemonFixture(extraConfig: "subscriber_queue = 200\nlagging_send_buffer_bytes = 8192")
        let (stalled, reader, control) = try await Self.stalledReaderAndControl(f)
        func clients(_ id: String) async -> [JSONValue] {
            control.send(#"{"id":"\#(id)","op":"clients"}"#)
            guard case .array(let list)? = await control.reply(id)?.value(at: "result.clients") else { return [] }
            return list
        }
        // Far more than its queue, socket buffer and NIO's high watermark hold.
        f.server.command("ticker 2000 1000 6000")
        #expect(await reader.lines.wait(timeout: .seconds(120), containing: "\"seq\":6000,") != nil)
        let during = await clients("c1")
        let lagging = during.filter { $0["lagging"] == true }
        #expect(lagging.count == 1 && (lagging.first?["drops"]?.intValue ?? 0) > 0, "\(during)")
        stalled.startReading()
        #expect(await stalled.lines.wait(timeout: .seconds(60), containing: "\"seq\":6000,") != nil)
        try await eventually(
            "the stalled one caught up", { await clients("c\(control.lines.count)") },
            until: { list in
                list.count == 3 && list.allSatisfy { $0["lagging"] == nil }
            })
    }

    /// A burst far past `subscriber_queue` that a subscriber reads within
    /// `subscriber_queue_burst` is not lost: here one that reads nothing until the burst is over
    /// (the burst set long, so that a busy machine cannot age it) gets every line, no `dropped`.
    @Test func aSubscriberLosesNoneOfABurstItReadsWithinTheBurstTime() async throws {
        let f = try await DaemonFixture(extraConfig: "subscriber_queue = 100\nsubscriber_queue_burst = \"60s\"\nlagging_send_buffer_bytes = 8192")
        let (stalled, reader, _) = try await Self.stalledReaderAndControl(f)
        // 1,000 lines of 1 KB: 10 times its queue (a burst keeps 16 times it), 60 times its
        // socket buffer.
        f.server.command("burst 1000 1000")
        #expect(await reader.lines.wait(timeout: .seconds(60), containing: "\"seq\":1000,") != nil)
        try await awaitStatus(f.socket, "the burst queued for the stalled one") { $0.seq == 1000 }
        stalled.startReading()
        #expect(await stalled.lines.wait(timeout: .seconds(60), containing: "\"seq\":1000,") != nil)
        let seqs = stalled.lines.lines.compactMap { line in
            (try? JSONValue.parse(line)).flatMap { $0["type"] == "message" ? $0["seq"]?.intValue : nil }
        }
        #expect(seqs == Array(1...1000), "\(seqs.count) lines")
        #expect(!stalled.lines.lines.contains { $0.contains("\"type\":\"dropped\"") })
        #expect(try daemonStatus(f.socket).drops == 0)
    }

    /// Every client's socket starts with the small send buffer; one that reads fast when the
    /// feed gets ahead of it (here a burst far larger than its buffer, read as it comes) gets
    /// `local.send_buffer_bytes`; one that does not read, and one never behind, keep the small one.
    @Test func aClientThatReadsFastGetsTheLargeSendBuffer() async throws {
        let f = try await DaemonFixture(extraConfig: "send_buffer_bytes = 65536\nlagging_send_buffer_bytes = 8192")
        let (stalled, reader, control) = try await Self.stalledReaderAndControl(f)
        // 3 MB at once: 45 times the large buffer, more than the stalled one's queue and buffer hold.
        f.server.command("burst 3000 1000")
        #expect(await reader.lines.wait(timeout: .seconds(120), containing: "\"seq\":3000,") != nil)
        control.send(#"{"id":"c","op":"clients"}"#)
        guard case .array(let list)? = await control.reply("c")?.value(at: "result.clients") else { throw TestFailure("no clients") }
        let buffers = list.map { $0["send_buffer"]?.intValue }
        // In connection order: the stalled one, the reader, the control client.
        #expect(buffers == [8192, 65536, 8192], "\(list)")
        // As the kernel has them (doubled).
        #expect(try await Self.kernelSendBuffer(of: reader) == 2 * 65536)
        #expect(try await Self.kernelSendBuffer(of: stalled) == 2 * 8192)
    }

    /// A reload that takes the small buffer away (`lagging_send_buffer_bytes = 0`) gives every
    /// client on it the large one at once.
    @Test func aReloadWithoutTheSmallBufferGivesEveryClientTheLargeOne() async throws {
        let f = try await DaemonFixture(extraConfig: "send_buffer_bytes = 65536\nlagging_send_buffer_bytes = 8192")
        let client = try await f.client(name: "client")
        #expect(try await Self.kernelSendBuffer(of: client) == 2 * 8192)
        let config = f.dir.file("wsbridged.toml")
        let text = try String(contentsOfFile: config, encoding: .utf8)
        try text.replacingOccurrences(of: "lagging_send_buffer_bytes = 8192", with: "lagging_send_buffer_bytes = 0").write(
            toFile: config, atomically: true, encoding: .utf8)
        let mark = f.daemon.eventMark
        f.daemon.signal(SIGHUP)
        #expect(await f.daemon.awaitReady(from: mark), "\(f.daemon.stderr.text.suffix(2000))")
        #expect(try await Self.kernelSendBuffer(of: client) == 2 * 65536)
        client.send(#"{"id":"c","op":"clients"}"#)
        guard case .array(let list)? = await client.reply("c")?.value(at: "result.clients") else { throw TestFailure("no clients") }
        #expect(list.first?["send_buffer"] == 65536, "\(list)")
    }

    /// Three clients, in this order: a subscriber that never reads, one that reads, and one that
    /// unsubscribed (it asks `clients`).
    static func stalledReaderAndControl(_ f: DaemonFixture) async throws -> (SocketClient, SocketClient, SocketClient) {
        let stalled = try SocketClient(path: f.socket, reading: false, name: "stalled")
        let reader = try await f.client(name: "reader")
        let control = try await f.client(name: "control")
        control.send(#"{"id":"u","op":"unsubscribe"}"#)
        _ = await control.reply("u")
        return (stalled, reader, control)
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/prlimit"), "needs prlimit (util-linux)"))
    func outOfFileDescriptorsAcceptWaitsInsteadOfSpinning() async throws {
        let f = try await DaemonFixture(launcher: ["/usr/bin/prlimit", "--nofile=40", "--"])
        var clients: [SocketClient] = []
        for i in 0..<60 { clients.append(try SocketClient(path: f.socket, name: "c\(i)")) }
        // About 28 fit beside the daemon's own descriptors; the first 20 surely do.
        for c in clients.prefix(20) {
            #expect(await c.lines.wait(containing: "\"type\":\"hello\"") != nil)
        }
        // STATUS= says so (from the notify socket the daemon opened at start: no descriptor
        // is needed to send it), and status says why.
        #expect(await f.daemon.awaitEvent { $0.hasPrefix("STATUS=") && $0.hasSuffix(", NOT accepting clients") }, "\(f.daemon.stderr.text)")
        clients[0].send(#"{"id":"s","op":"status"}"#)
        let reason = await clients[0].reply("s")?.value(at: "result.not_accepting")?.stringValue
        #expect(reason?.contains("Raise LimitNOFILE=") == true, "\(String(describing: reason))")
        #expect(!clients[45].lines.text.contains("hello"))
        // Waiting, not spinning: over one second the daemon uses a small part of a core.
        let before = try Self.cpuTicks(f.daemon.pid)
        try await Task.sleep(for: .seconds(1))
        let used = try Self.cpuTicks(f.daemon.pid) - before
        #expect(used < Self.ticksPerSecond / 4, "the daemon used \(used) of \(Self.ticksPerSecond) ticks in one second")
        #expect(f.daemon.stderr.lines.filter { $0.contains("cannot accept local clients") }.count == 1, "\(f.daemon.stderr.text)")
        // fds free up: the clients that waited are accepted, and STATUS= says so. (The last 20
        // go too: with them waiting, the daemon is out of descriptors again at once, rightly
        // NOT accepting, and the moment between may never reach STATUS=.)
        let mark = f.daemon.eventMark
        for c in clients.prefix(20) + clients[40...] { c.close() }
        for c in clients[20..<40] {
            #expect(await c.lines.wait(containing: "\"type\":\"hello\"") != nil)
        }
        #expect(await f.daemon.awaitEvent(from: mark) { $0.hasPrefix("STATUS=") && !$0.contains("NOT accepting") }, "\(f.daemon.events?.messages.text ?? "")")
        // And the log (read from its pipe, which may come after the datagram).
        #expect(await f.daemon.stderr.wait(containing: "accepting local clients again") != nil, "\(f.daemon.stderr.text)")
    }

    static let ticksPerSecond = Int(sysconf(Int32(_SC_CLK_TCK)))

    /// utime + stime of a process, in clock ticks.
    static func cpuTicks(_ pid: Int32) throws -> Int {
        let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
        let fields = stat[stat.index(after: stat.lastIndex(of: ")")!)...].split(separator: " ")
        return Int(fields[11])! + Int(fields[12])!
    }

    @Test func peerCredentialsFailClosed() {
        // What NIO hands back when the kernel wrote nothing: zeros, which would read as root.
        #expect(PeerCredentials(kernel: cwsb_ucred(pid: 0, uid: 0, gid: 0)) == nil)
        #expect(PeerCredentials(kernel: cwsb_ucred(pid: 0, uid: 1000, gid: 1000)) == nil)
        #expect(PeerCredentials(kernel: cwsb_ucred(pid: 42, uid: 0, gid: 0)) == PeerCredentials(pid: 42, uid: 0, gid: 0))
        // The option number comes from the C library's macro for this architecture.
        #expect(cwsb_so_peercred() == SO_PEERCRED)
    }
}

extension LocalPlaneLimitsTests {
    /// A client socket's SO_SNDBUF is `local.lagging_send_buffer_bytes` from its accept (until
    /// it reads fast), or `local.send_buffer_bytes` when there is no smaller one, as the kernel
    /// reports it (`ss`: doubled, capped at net.core.wmem_max); 0 and 0 leave the system's default.
    @Test(arguments: [(150_000, 0), (0, 0), (150_000, 8192)])
    func aClientSocketsSendBufferIsTheSetting(bytes: Int, lagging: Int) async throws {
        let f = try await DaemonFixture(extraConfig: "send_buffer_bytes = \(bytes)\nlagging_send_buffer_bytes = \(lagging)")
        let client = try await f.client(name: "client")
        defer { client.close() }
        let sendBuffer = try await Self.kernelSendBuffer(of: client)
        let set = lagging > 0 && lagging < bytes ? lagging : bytes
        let expected = set > 0 ? 2 * min(set, try Self.sysctl("wmem_max")) : try Self.sysctl("wmem_default")
        #expect(sendBuffer == expected)
    }

    static func sysctl(_ name: String) throws -> Int {
        Int(try String(contentsOfFile: "/proc/sys/net/core/\(name)", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    /// The send buffer of the daemon's end of `client`'s connection, as the kernel reports it
    /// (`ss -x -m`: the socket whose peer is this client's, `… * <our inode> skmem:(…,tb…)`).
    static func kernelSendBuffer(of client: SocketClient) async throws -> Int? {
        var st = stat()
        #expect(fstat(client.fd, &st) == 0)
        let ss = try ManagedProcess("/usr/bin/ss", ["-x", "-m", "-H"], name: "ss")
        #expect(await ss.waitForExit() == 0)
        let line = ss.stdout.text.split(separator: "\n").first { $0.split(separator: " ").dropLast().last == "\(st.st_ino)" }
        #expect(line != nil, "no socket whose peer is inode \(st.st_ino)")
        return line?.split(separator: ",").first { $0.hasPrefix("tb") }.flatMap { Int($0.dropFirst(2)) }
    }
}
