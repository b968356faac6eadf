import NIOCore
import Testing
import WSBridgeCore
import WSBridgeDaemon
import WSBridgeProtocol

/// upstream.fallback_urls and upstream.failback_after, against real servers on loopback.
@Suite struct FailoverTests {
    @Test func aFailingPrimaryMovesToTheFallbackAndBackWhenItReturns() async throws {
        // The primary refuses the WebSocket upgrade (a server that is there but unwell).
        let primary = try await UpstreamServer(.nio)
        primary.command("refuse on")
        let primaryPort = primary.port
        let fallback = try await UpstreamServer(.nio)

        var config = try LinkHarness.configuration(url: "ws://127.0.0.1:\(primaryPort)/primary")
        config.upstream.fallbackURLs = [try UpstreamURL(parsing: "ws://127.0.0.1:\(fallback.port)/fallback")]
        config.upstream.headers = [.init(name: "Authorization", value: "Bearer per-url")]
        let link = try await LinkHarness(config)
        defer { Task { await link.shutdown() } }
        link.handle.connect()

        // Attempt 1 fails on the primary, attempt 2 opens on the fallback, with the same headers.
        #expect(await link.state(.open) != nil, "\(link.events.text)")
        #expect(await fallback.event("upgrade path=/fallback authorization=Bearer per-url") != nil)
        #expect(try await link.handle.status().get().url == "ws://127.0.0.1:\(fallback.port)/fallback")

        // The primary recovers, and failback_after is set (as a reload would): after it, the
        // link goes back to the primary. (Set only now, so the check above cannot race it; if
        // the first try back came before the server read "refuse off", the next one succeeds.)
        let mark = link.mark
        let serverMark = primary.mark
        primary.command("refuse off")
        config.upstream.failbackAfter = .milliseconds(300)
        link.handle.update(configuration: config)
        #expect(
            await primary.event("upgrade path=/primary authorization=Bearer per-url", from: serverMark, timeout: .seconds(30)) != nil, "\(link.events.text)")
        // Open on the primary: the link's events say which URL each attempt used, so the open
        // that follows an attempt to the primary is awaited (a first try back may have lost to
        // "refuse off" and gone on to the fallback, which opens too).
        let primaryURL = "ws://127.0.0.1:\(primaryPort)/primary"
        var from = mark
        var openOnPrimary = false
        while !openOnPrimary, let opened = await link.events.wait(count: 1, from: from, { $0.hasPrefix("state open:") }).first {
            let lines = link.events.lines
            guard let index = lines[from...].firstIndex(of: opened) else { break }
            openOnPrimary = lines[..<index].last { $0.hasPrefix("attempt ") }?.hasSuffix(" \(primaryURL)") == true
            from = index + 1
        }
        #expect(openOnPrimary, "\(link.events.text)")
        let status = try await link.handle.status().get()
        #expect(status.url == primaryURL && status.state == .open, "\(link.events.text)")
    }

    /// Renewals (`upstream.max_lifetime`) on a fallback do not keep the link there: the return
    /// to the primary is planned when the link opened on the fallback, and a renewed connection
    /// goes back when the old one would have. (Before, the plan was the first connection's and
    /// ended with it at the first takeover: the link stayed on the fallback for good.)
    @Test func renewalsOnAFallbackStillGoBackToThePrimary() async throws {
        let primary = try await UpstreamServer(.nio)
        primary.command("refuse on")
        let fallback = try await UpstreamServer(.nio)
        // Both connections of a renewal get the same ticks: the new one takes over once it
        // delivered one the old one did.
        fallback.command("ticker 100 64")
        var config = try LinkHarness.configuration(url: "ws://127.0.0.1:\(primary.port)/primary")
        config.upstream.fallbackURLs = [try UpstreamURL(parsing: "ws://127.0.0.1:\(fallback.port)/fallback")]
        config.upstream.maxLifetime = .seconds(1)
        config.upstream.renewJitter = .zero
        config.upstream.dedupe = ["tick"]
        config.upstream.failbackAfter = .seconds(4)
        let link = try await LinkHarness(config)
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        #expect(await link.state(.open) != nil, "\(link.events.text)")
        // Two renewals begun on the fallback (its second and third upgrade): one at a time, so
        // the first one's connection took over before the second began. Then the primary recovers.
        let upgrades = await fallback.process.stdout.wait(count: 3, timeout: .seconds(60)) { $0.hasPrefix("upgrade path=/fallback") }
        #expect(upgrades.count == 3, "\(link.events.text)")
        let renewals = try await link.handle.status().get().renewal?.renewals ?? 0
        #expect(renewals >= 1, "\(link.events.text)")
        let serverMark = primary.mark
        primary.command("refuse off")
        // Back on the primary: its upgrade (a first try back may have come before "refuse off"
        // and failed; the link then opened on the fallback again and plans its return anew).
        #expect(await primary.event("upgrade path=/primary", from: serverMark, timeout: .seconds(60)) != nil, "\(link.events.text)")
        fallback.command("ticker off")
    }

    @Test func everyURLFailingGoesRoundTheListWithTheSameBackoff() async throws {
        let a = try ReservedPort()
        let b = try ReservedPort()
        defer {
            a.release()
            b.release()
        }
        let (portA, portB) = (a.port, b.port)
        var config = try LinkHarness.configuration(url: "ws://127.0.0.1:\(portA)/")
        config.upstream.fallbackURLs = [try UpstreamURL(parsing: "ws://127.0.0.1:\(portB)/")]
        let link = try await LinkHarness(config)
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        // attempt 1 -> A, 2 -> B, 3 -> A: each failure says which it was, and schedules one
        // backoff retry (the same policy, counting every failure).
        // A generous bound: under a loaded suite the test process itself may wait its turn.
        let failed = await link.events.wait(count: 3, timeout: .seconds(90)) { $0.hasPrefix("state backingOff:") }
        #expect(failed.count == 3)
        for (line, port) in zip(failed, [portA, portB, portA]) {
            #expect(line.contains("cannot connect to 127.0.0.1:\(port)"), "\(line)")
        }
        let retries = link.events.lines.filter { $0.hasPrefix("retry ") }.prefix(3).map { $0.split(separator: " ").prefix(2).joined(separator: " ") }
        #expect(retries == ["retry 2", "retry 3", "retry 4"], "\(link.events.text)")
    }
}
