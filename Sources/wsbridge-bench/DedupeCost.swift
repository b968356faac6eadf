import ArgumentParser
import Foundation
import WSBridgeCore

#if canImport(Glibc)
    import Glibc
#endif

/// The cost of a renewal's overlap per message (issue 44), counted by callgrind: the two
/// connections' messages, 100-byte Binance-style depth updates of 10 streams, each through
/// `OverlapDedupe` (the old connection's first, the new one's matched against them), by the
/// `upstream.dedupe` paths and by the bytes. Itself run twice under callgrind, for N and 2N
/// messages per connection; the difference over 2N (both connections' messages) is the cost of
/// one message, the start cancelling out. Only during an overlap: without one the link does not
/// call it (one check of an optional per message).
struct DedupeCost: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dedupe-cost", abstract: "Instructions per message of a renewal's overlap (OverlapDedupe), counted by callgrind.")

    @Option(help: "Messages per connection of the short run (the long run has twice as many).")
    var messages = 20_000

    @Option(help: "Internal: MODE:N, the overlap of N messages per connection by paths (paths) or bytes (bytes), or only the texts' making (texts).")
    var run: String?

    func run() async throws {
        if let run = self.run {
            let parts = run.split(separator: ":")
            Self.overlap(messages: Int(parts[1]) ?? 0, mode: String(parts[0]))
            return
        }
        // valgrind cannot read the static build's debug information: a copy without it.
        let me = FileManager.default.temporaryDirectory.appendingPathComponent("wsbridge-bench-\(getpid())").path
        guard try Command.run("/usr/bin/strip", ["--strip-debug", CommandLine.arguments[0], "-o", me]) == 0 else {
            throw BenchError("strip --strip-debug \(CommandLine.arguments[0]) failed")
        }
        defer { try? FileManager.default.removeItem(atPath: me) }
        var rows: [String] = []
        var perMode: [String: Double] = [:]
        for mode in ["texts", "paths", "bytes"] {
            var totals: [Int] = []
            for n in [self.messages, 2 * self.messages] {
                let out = FileManager.default.temporaryDirectory.appendingPathComponent("dedupe-\(getpid())-\(mode)-\(n).out").path
                defer { try? FileManager.default.removeItem(atPath: out) }
                let status = try Command.run(
                    "/usr/bin/valgrind", ["--tool=callgrind", "-q", "--callgrind-out-file=\(out)", me, "dedupe-cost", "--run", "\(mode):\(n)"])
                guard status == 0 else { throw BenchError("valgrind \(me) dedupe-cost --run \(mode):\(n) failed (\(status))") }
                totals.append(try Cost.parse(out)["total"] ?? 0)
            }
            // The long run has 2N more messages than the short (N more per connection).
            perMode[mode] = Double(totals[1] - totals[0]) / Double(2 * self.messages)
        }
        // The texts' making (counted alone) is not the overlap's.
        let texts = perMode["texts"] ?? 0
        for (mode, label) in [("paths", "dedupe = [\"stream\", \"data.u\"]"), ("bytes", "dedupe = [] (the bytes)")] {
            rows.append(
                "\(label): \(Int(((perMode[mode] ?? 0) - texts).rounded())) instructions per message (the texts' making, \(Int(texts.rounded())), taken off)")
        }
        for row in rows { print(row) }
    }

    /// The overlap of two connections carrying the same `messages` updates: the old one a few
    /// ahead, the new one matched against it (every one of its messages a duplicate).
    static func overlap(messages: Int, mode: String) {
        var dedupe = OverlapDedupe<Int>(paths: mode == "paths" ? ["stream", "data.u"] : [], window: 65_536)
        let texts = (0..<messages).map { n in
            Array(#"{"stream":"s\#(n % 10)","data":{"e":"depthUpdate","E":1700000000000,"s":"BTCUSDT","U":\#(n),"u":\#(n),"b":[],"a":[]}}"#.utf8)
        }
        var delivered = 0
        guard mode != "texts" else {
            print("made \(texts.reduce(0) { $0 + $1.count }) bytes")
            return
        }
        for (n, text) in texts.enumerated() {
            if text.withUnsafeBytes({ dedupe.admit(n, bytes: $0, from: .old) }) != nil { delivered += 1 }
            if n >= 4, texts[n - 4].withUnsafeBytes({ dedupe.admit(n - 4, bytes: $0, from: .new) }) != nil { delivered += 1 }
        }
        print("delivered \(delivered) of \(2 * messages - 4)")
    }
}
