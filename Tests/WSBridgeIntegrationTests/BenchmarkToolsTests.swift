import Foundation
import Testing
import WSBridgeProtocol

/// The benchmark's own parts must be right before their figures mean anything: the generator's
/// pre-encoded frames pass through wsbridged as valid messages, in order, stamped; the raw-copy
/// baseline writes the lines a bridge would; the reader counts them and their latency.
@Suite struct BenchmarkToolsTests {
    static let release = ProcessInfo.processInfo.environment["WSBRIDGE_RELEASE_BIN_DIR"]
    /// valgrind and a release wsbridge-bench: what the callgrind-based tools need.
    static let hasCallgrind =
        release.map { FileManager.default.fileExists(atPath: "\($0)/wsbridge-bench") } == true
        && FileManager.default.isExecutableFile(atPath: "/usr/bin/valgrind")

    /// `wsbridge-bench cost` counts a release daemon under callgrind (valgrind cannot run the
    /// debug build's dynamic Swift runtime): the figure is per message (start-up cancels), in
    /// a range no real daemon leaves (docs/performance.md has the figures), and split into
    /// phases that add up to it.
    @Test(.enabled(if: hasCallgrind, "needs valgrind and the release build with wsbridge-bench (scripts/test builds it)"))
    func theCostBenchmarkCountsInstructionsPerMessage() throws {
        let bin = try #require(Self.release)
        let r = try spawnAndWait(
            "\(bin)/wsbridge-bench",
            ["cost", "--bin", bin, "--messages", "1000", "--subscribers", "1", "--deflate", "off", "--python", Paths.python],
            directory: Paths.root)
        #expect(r.status == 0, "\(r.stdout)\(r.stderr.suffix(2000))")
        let row = try #require(r.stdout.split(separator: "\n").first { $0.hasPrefix("| wsbridged, 1 sub, 100 B, deflate off |") }, "\(r.stdout)")
        let cells = row.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.dropFirst().compactMap { Int($0) }
        let total = try #require(cells.first)
        print("measure: cost \(total) instructions per message (1 subscriber, 100 B)")
        #expect((3_000...30_000).contains(total), "\(row)")
        #expect(abs(cells.dropFirst().reduce(0, +) - total) <= 7, "the phases add up to the total: \(row)")
    }

    /// `wsbridge-bench order-file` profiles a release daemon's life and names, as function
    /// sections, what it ran: the entry point, the fan-out's publish, the heartbeat, the reload.
    @Test(.enabled(if: hasCallgrind, "needs valgrind and the release build with wsbridge-bench (scripts/test builds it)"))
    func theOrderFileNamesTheFunctionsTheDaemonRuns() throws {
        let bin = try #require(Self.release)
        let dir = try TemporaryDirectory()
        let output = dir.file("hot-text.order")
        let r = try spawnAndWait("\(bin)/wsbridge-bench", ["order-file", "--bin", bin, "--output", output, "--messages", "500"], directory: Paths.root)
        #expect(r.status == 0, "\(r.stdout)\(r.stderr.suffix(2000))")
        let sections = try String(contentsOfFile: output, encoding: .utf8).split(separator: "\n")
        print("measure: \(r.stdout.split(separator: "\n").last ?? "")")
        #expect(sections.count > 1_000 && sections.allSatisfy { $0.hasPrefix(".text.") }, "\(sections.count) lines: \(sections.prefix(3))")
        #expect(Set(sections).count == sections.count, "each function once")
        for part in ["wsbridged_main", "6FanoutC7publish", "HeartbeatStateMachine", "ServiceC6reload"] {
            #expect(sections.contains { $0.contains(part) }, "no function with \(part) in its name")
        }
    }

    /// The release link lays out the functions scripts/lib/hot-text.order names in its order:
    /// most follow the one before within 64 KiB (about 3 % of them do in a link without it).
    @Test(.enabled(if: release != nil, "needs the release build (scripts/test builds it)"))
    func theReleaseDaemonsHotFunctionsAreLaidOutTogether() throws {
        let bin = try #require(Self.release)
        let r = try spawnAndWait("/usr/bin/nm", ["--defined-only", "\(bin)/wsbridged"])
        #expect(r.status == 0)
        var address: [Substring: UInt64] = [:]
        for line in r.stdout.split(separator: "\n") {
            let f = line.split(separator: " ", maxSplits: 2)
            if f.count == 3, "tTwW".contains(f[1]) { address[f[2]] = UInt64(f[0], radix: 16) }
        }
        let order = try String(contentsOfFile: "\(Paths.root)/scripts/lib/hot-text.order", encoding: .utf8)
        let placed = order.split(separator: "\n").compactMap { address[$0.dropFirst(".text.".count)] }
        #expect(placed.count > 1_000, "the order file's functions are in the binary: \(placed.count)")
        let together = zip(placed, placed.dropFirst()).filter { $1 > $0 && $1 - $0 < 65_536 }.count
        let share = Double(together) / Double(max(1, placed.count - 1))
        print("measure: \(Int(share * 100)) % of the hot functions follow the one before within 64 KiB")
        #expect(share > 0.6, "\(together) of \(placed.count)")
    }

    @Test func theGeneratorsFramesArriveInOrderAndStamped() async throws {
        let f = try await DaemonFixture()
        let subscriber = try await f.client()
        let mark = f.server.mark
        f.server.command("flood 3000 200")
        #expect(await f.server.event("flood done 3000", from: mark) != nil)
        guard await subscriber.lines.wait(containing: "__end__") != nil else {
            Issue.record("no end marker: \(subscriber.lines.lines.suffix(3))")
            return
        }
        let messages = subscriber.messages.compactMap(MessageLine.init(json:))
        #expect(messages.count == 3001)
        var index = 0
        for message in messages.dropLast() {
            // {"t":10^19 + ns,"i":10^10 + index,"p":"x…"}, 200 bytes, valid JSON.
            let payload = try JSONValue.parse(message.data ?? "")
            #expect(message.data?.utf8.count == 200)
            #expect(payload["i"]?.intValue == 10_000_000_000 + index)
            guard case .number(let t)? = payload["t"] else {
                Issue.record("no send time in \(message.data ?? "")")
                return
            }
            #expect(t.text.utf8.count == 20 && (UInt64(t.text) ?? 0) > 10_000_000_000_000_000_000)
            index += 1
        }
        #expect(messages.last?.data == #"{"end":"__end__"}"#)
    }

    /// `raw-copy` with `options` to 2 reader connections in one wsbridge-reader: its JSON result.
    func rawCopyToOneReader(_ options: [String]) async throws -> JSONValue {
        let dir = try TemporaryDirectory()
        let socket = dir.file("raw.sock")
        let copy = try ManagedProcess("\(Paths.bin)/wsbridge-bench", ["raw-copy", "--socket", socket, "--connections", "2"] + options, name: "raw-copy")
        defer { copy.stop() }
        #expect(await copy.stdout.wait(containing: "listening") != nil)
        let reader = try ManagedProcess("\(Paths.bin)/wsbridge-reader", ["--socket", socket, "--connections", "2"], name: "reader")
        defer { reader.stop() }
        let result = await reader.stdout.wait(containing: "\"messages\"")
        return try JSONValue.parse(result ?? "{}")
    }

    @Test func theRawCopyBaselineWritesWhatTheReaderCounts() async throws {
        let json = try await self.rawCopyToOneReader(["--messages", "5000"])
        #expect(json["messages"]?.intValue == 2 * 5001, "\(json.serialized)")
        #expect(json["lost"]?.intValue == 0 && json["gaps"]?.intValue == 0 && json["ended"]?.intValue == 2)
        // Flat out, the lines carry no send time: the reader records no latency.
        #expect(json["latency_count"]?.intValue == 0)
    }

    @Test func theRawCopyBaselineAtARateStampsEachLineWhenItIsWritten() async throws {
        let json = try await self.rawCopyToOneReader(["--messages", "300", "--rate", "3000"])
        #expect(json["messages"]?.intValue == 2 * 301, "\(json.serialized)")
        #expect(json["lost"]?.intValue == 0 && json["gaps"]?.intValue == 0 && json["ended"]?.intValue == 2)
        // Every message has a real send time: its latency is recorded.
        #expect(json["latency_count"]?.intValue == 2 * 300)
        // 300 messages at 3000/s are spread over about 100 ms, not written in one burst.
        let first = json["first_ns"]?.intValue ?? 0
        let last = json["last_ns"]?.intValue ?? 0
        #expect(last - first >= 50_000_000, "\(json.serialized)")
    }
}
