import ArgumentParser
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The cost of one upstream message in instructions, counted by callgrind: a figure that does
/// not move with the machine's load, unlike wall-clock time on a shared machine. The daemon runs
/// under `valgrind --tool=callgrind` twice per configuration, for N and 2N messages flooded by the
/// generator to fast native readers; the difference over N is the cost of N messages, start-up
/// and shutdown cancelling out. Split by phase from the profile's self costs (the functions'
/// names: read, framing and validation, inflate, fan-out and encoding, socket writes, the Swift
/// runtime and allocator, the rest).
struct Cost: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Instructions per upstream message, or per local send (--sends), counted by callgrind, by phase; beside a baseline build."
    )

    @OptionGroup var builds: Builds

    @Option(help: "Messages of the short run with one subscriber (the long run has twice as many; a tenth with 100 subscribers).")
    var messages = 20_000

    @Option(help: "Message size in bytes.")
    var size = 100

    @Option(help: "Subscriber counts, comma-separated.")
    var subscribers = "1,100"

    @Option(help: "permessage-deflate settings to count, comma-separated: off, on.")
    var deflate = "off,on"

    @Option(
        help:
            "upstream.protocol of the daemon under count (raw, json, jsonrpc...): with one set, every text message goes through the protocol layer (the flood's messages, which carry no id, are broadcasts)."
    )
    var `protocol` = "raw"

    @Flag(
        help:
            "Count routed messages (--protocol json, jsonrpc, graphql-transport-ws, stomp or nats): every subscriber holds one subscription (json: a sticky send with an id; jsonrpc: eth_subscribe, answered with server id 0x1; graphql-transport-ws: subscribe; stomp: SUBSCRIBE; nats: SUB) and every flooded message belongs to it, so each goes to its holders instead of being broadcast. socketio's flood is events, broadcast."
    )
    var routed = false

    @Option(
        help:
            "The flooded messages' shape (json, jsonrpc, graphql-transport-ws, socketio, stomp, nats; default: the protocol's): with --protocol raw, the baseline a protocol's routed cost is set against."
    )
    var shape: String?

    @Flag(
        help:
            "With --routed (json): half the subscribers hold the subscription under id 2 instead of the wire's 1, so that each message is written again with their id (the rewrite's cost per holder)."
    )
    var halfOtherId = false

    @Flag(
        help:
            "Count a local send instead of an upstream message: one client pipelines the sends (text of --size bytes) and reads every reply; the upstream takes them without echo."
    )
    var sends = false

    @Flag(
        help:
            "With --sends and --protocol socketio: each send is an emit with an ack id (42N[\"ev\",\"x...\"]), which the upstream answers with its ack of --size bytes (43N[…]) and the client reads (all in flight at once: protocol.max_per_app and max_total raised for it). The upstream holds the acks until every emit came, then writes them at once, as it floods messages: an ack's routed cost is the upstream's path in --profiles (scripts/bench/cost-diff.py --inclusive, docs/performance.md), and a call's cost on the way up --acks --unanswered less --sends alone (emits without an ack id, 42[\"ev\",\"x...\"])."
    )
    var acks = false

    @Flag(help: "With --acks: the upstream does not answer the emits (their calls stay open): the send of a call without its ack.")
    var unanswered = false

    @Option(
        help:
            "TOML added to the daemon's [upstream] under count (and not to the baseline's when it does not know it: pass --baseline-upstream), e.g. '[upstream.limits]\\nmessages_per_second = 1000000' to count the pace."
    )
    var upstream = ""

    @Option(help: "TOML added to the baseline daemon's [upstream] (default: --upstream's).")
    var baselineUpstream: String?

    @Option(
        help:
            "TOML added to the [local] of the daemon under count (not the baseline's), e.g. 'lagging_send_buffer_bytes = 0' to give every reader the large send buffer from its accept, as builds before issue 46's did."
    )
    var local = ""

    @Option(help: "Python with `websockets` (the upstream when deflate is on).")
    var python = ".build/venv/bin/python"

    @Option(help: "The Python upstream (flood with permessage-deflate).")
    var peer = "Tests/peers/ws_server.py"

    @Option(
        help:
            "Where the subscribers read: ndjson (wsbridge-reader on the Unix socket) or websocket (the WebSocket face's Unix socket, scripts/bench/ws_readers.py with --python)."
    )
    var face = "ndjson"

    @Option(help: "Keep each run's callgrind profile in this folder (callgrind.NAME.SUBSsub.deflate-D.MESSAGES.out, for callgrind_annotate).")
    var profiles: String?

    static let phases = ["read", "framing", "inflate", "fan-out", "writes", "runtime", "other"]

    /// What a text protocol's server answers its handshake with (the testserver's `sendx`).
    static let acknowledgements = [
        "socketio": #"40{"sid":"bench"}"#, "stomp": #"CONNECTED\nversion:1.2\n\n\0"#, "nats": #"PONG\r\n"#,
        "graphql-transport-ws": #"{"type":"connection_ack"}"#,
    ]

    /// The request line that makes a reader hold the subscription the flood's messages belong to
    /// (`--routed`): json's is a sticky send with id 1; STOMP's MESSAGEs and NATS's MSGs name
    /// subscription 1 (Socket.IO has none: its events are broadcasts).
    static let holds = [
        "json": #"{"id":"s","op":"send","sticky":"feed","text":"{\"id\":1,\"type\":\"subscribe\"}"}"#,
        "stomp": #"{"id":"s","op":"send","text":"SUBSCRIBE\nid:s\ndestination:/topic/a\n\n\u0000"}"#,
        "nats": #"{"id":"s","op":"send","text":"SUB a s\r\n"}"#,
        "jsonrpc": #"{"id":"s","op":"send","text":"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eth_subscribe\",\"params\":[\"newHeads\"]}"}"#,
        "graphql-transport-ws": #"{"id":"s","op":"send","text":"{\"type\":\"subscribe\",\"id\":\"s\",\"payload\":{\"query\":\"subscription { t }\"}}"}"#,
    ]

    /// The subprotocol a protocol's link offers, which the server must take.
    static let subprotocols = ["stomp": "v12.stomp", "graphql-transport-ws": "graphql-transport-ws"]

    /// What the server answers the readers' subscriptions with before the flood (jsonrpc: the
    /// server's id of the subscription, on the wire id 1).
    static let answers = ["jsonrpc": #"{"jsonrpc":"2.0","id":1,"result":"0x1"}"#]

    func run() async throws {
        if self.acks, !self.sends || self.protocol != "socketio" {
            throw BenchError("--acks counts Socket.IO's acks: it needs --sends and --protocol socketio")
        }
        if self.unanswered, !self.acks { throw BenchError("--unanswered goes with --acks") }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("wsbridge-cost-\(getpid())").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let daemons = self.builds.daemons
        // valgrind cannot read the static build's debug information: a copy without it.
        for (name, path) in daemons {
            let r = try Command.run("/usr/bin/strip", ["--strip-debug", path, "-o", "\(dir)/\(name)"])
            guard r == 0 else { throw BenchError("strip --strip-debug \(path) failed") }
        }
        let counts = self.subscribers.split(separator: ",").compactMap { Int($0) }
        let deflates = self.deflate.split(separator: ",").map { $0 == "on" }
        var rows: [(String, [String: Double])] = []
        for subscribers in counts {
            for deflate in deflates {
                let n = subscribers >= 10 ? max(200, self.messages / 10) : self.messages
                var byDaemon: [String: Double] = [:]
                for (name, _) in daemons {
                    var runs: [[String: Int]] = []
                    for messages in [n, 2 * n] {
                        runs.append(try await self.count(daemon: "\(dir)/\(name)", dir: dir, messages: messages, subscribers: subscribers, deflate: deflate))
                        if let profiles {
                            try FileManager.default.createDirectory(atPath: profiles, withIntermediateDirectories: true)
                            let kept = "\(profiles)/callgrind.\(name).\(subscribers)sub.deflate-\(deflate ? "on" : "off").\(messages).out"
                            try? FileManager.default.removeItem(atPath: kept)
                            try FileManager.default.copyItem(atPath: "\(dir)/callgrind.out", toPath: kept)
                        }
                    }
                    let (short, long) = (runs[0], runs[1])
                    var perMessage: [String: Double] = [:]
                    for phase in Self.phases + ["total"] {
                        perMessage[phase] = Double((long[phase] ?? 0) - (short[phase] ?? 0)) / Double(n)
                    }
                    let what = self.sends ? "send" : "message"
                    let label =
                        "\(name)\(self.sends ? ", sends" : "")\(self.acks ? (self.unanswered ? " with ack ids, unanswered" : " with acks") : "")\(self.routed ? ", routed" : "")\(self.halfOtherId ? " (half id 2)" : "")\(self.shape.map { ", \($0) shape" } ?? "")\(self.face == "websocket" ? ", websocket face" : ""), \(subscribers) sub\(subscribers == 1 ? "" : "s"), \(self.size) B, deflate \(deflate ? "on" : "off")"
                    emitLine(
                        "cost \(label): \(Int(perMessage["total"]!.rounded())) instructions per \(what) (runs of \(n) and \(2 * n) \(what)s)")
                    rows.append((label, perMessage))
                    byDaemon[name] = perMessage["total"]
                }
                if let now = byDaemon["wsbridged"], let before = byDaemon["baseline"], before > 0 {
                    emitLine(
                        "cost \(subscribers) sub(s), deflate \(deflate ? "on" : "off"): \(String(format: "%+.1f", (now / before - 1) * 100)) % against the baseline"
                    )
                }
            }
        }
        print("")
        print("| daemon, subscribers, size, deflate | instructions / \(self.sends ? "send" : "message") | " + Self.phases.joined(separator: " | ") + " |")
        print("| --- | ---: | " + Self.phases.map { _ in "---:" }.joined(separator: " | ") + " |")
        for (label, m) in rows {
            let cells = Self.phases.map { String(Int((m[$0] ?? 0).rounded())) }
            print("| \(label) | \(Int((m["total"] ?? 0).rounded())) | " + cells.joined(separator: " | ") + " |")
        }
    }

    /// One daemon run under callgrind: `messages` flooded to `subscribers` native readers.
    /// Returns the instructions of the whole run, in total and by phase.
    func count(daemon: String, dir: String, messages: Int, subscribers: Int, deflate: Bool) async throws -> [String: Int] {
        let generator: Child
        if deflate {
            generator = try Child(self.python, [self.peer, "--port", "0"])
        } else {
            // STOMP's and graphql's links offer their subprotocol, which the server must take.
            generator = try Child(
                "\(self.builds.bin)/wsbridge-testserver",
                ["--port", "0", "--no-echo", "--max-frame", "1048576"] + (Self.subprotocols[self.protocol].map { ["--subprotocol", $0] } ?? []))
        }
        defer { generator.stop() }
        let port = Int(try await generator.waitLine { $0.hasPrefix("listening ") }.dropFirst(10))!
        let socket = "\(dir)/cost.sock"
        let config = "\(dir)/cost.toml"
        try """
        [upstream]
        url = "ws://127.0.0.1:\(port)/"
        compression = \(deflate)
        protocol = "\(self.protocol)"
        \((daemon.hasSuffix("/baseline") ? self.baselineUpstream ?? self.upstream : self.upstream).replacingOccurrences(of: "\\n", with: "\n"))
        \(self.routed && self.protocol == "json" ? "[protocol]\nid = \"id\"" : "")
        \(self.acks ? "[protocol]\nmax_per_app = 1000000\nmax_total = 1000000" : "")
        [heartbeat]
        interval = "1h"
        [reachability]
        enabled = false
        [local]
        socket = "\(socket)"
        \(daemon.hasSuffix("/baseline") ? "" : self.local.replacingOccurrences(of: "\\n", with: "\n"))
        \(self.face == "websocket" ? "[local.websocket]\nsocket = \"\(dir)/face.sock\"" : "")
        [log]
        level = "warning"
        """.write(toFile: config, atomically: true, encoding: .utf8)
        let out = "\(dir)/callgrind.out"
        try? FileManager.default.removeItem(atPath: out)
        let bridge = try Child("/usr/bin/valgrind", ["--tool=callgrind", "-q", "--callgrind-out-file=\(out)", daemon, "--config", config])
        _ = try await generator.waitLine(seconds: 120) { $0.hasPrefix("connected ") }
        while !FileManager.default.fileExists(atPath: socket) { try await Task.sleep(for: .milliseconds(20)) }
        // A text protocol's link opens at the server's acknowledgement (its ready gate).
        if let ack = Self.acknowledgements[self.protocol] {
            generator.send("sendx \(ack)")
            let client = try BlockingClient(path: socket)
            while try await onThread({
                client.write(#"{"id":"s","op":"status"}"# + "\n")
                return try client.readReplies(1)
            }).contains(#""state":"open""#) == false {
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        if self.sends {
            // Socket.IO's emits, with an ack id when the server answers them (--acks).
            let pad = String(repeating: "x", count: max(1, self.size - 14))
            let acks = self.acks
            var text: (@Sendable (Int) -> String)?
            if self.protocol == "socketio" {
                text = { n in acks ? "42\(n + 1)[\\\"ev\\\",\\\"\(pad)\\\"]" : "42[\\\"ev\\\",\\\"\(pad)\\\"]" }
            }
            let answered = acks && !self.unanswered
            if answered {
                // Commands run in order on the server's loop: `count`'s answer says acks are on.
                generator.send("acks \(self.size) \(messages)")
                generator.send("count")
                _ = try await generator.waitLine(seconds: 60) { $0.hasPrefix("clients ") }
            }
            _ = try await SpoolCost.pipelined(
                socket: socket, clients: 1, total: messages, payload: String(repeating: "x", count: self.size), text: text, answered: answered)
            await bridge.stopAndWait()
            return try Self.parse(out)
        }
        // Readers wait long for lines: the daemon runs some 50 times slower under callgrind.
        // Routed: each reader holds the subscription the flood's messages answer (its first
        // upstream id, 1), and is ready once its send is answered.
        let hold = self.routed ? Self.holds[self.protocol] : nil
        var readers: [Child]
        if let hold, self.halfOtherId, subscribers > 1 {
            let other = hold.replacingOccurrences(of: #"{\"id\":1,"#, with: #"{\"id\":2,"#)
            readers =
                try startReaders(bin: self.builds.bin, socket: socket, subscribers: subscribers - subscribers / 2, extra: ["--idle", "600", "--send", hold])
                + startReaders(bin: self.builds.bin, socket: socket, subscribers: subscribers / 2, extra: ["--idle", "600", "--send", other])
        } else if self.face == "websocket" {
            // The face's apps, in up to 4 processes as the NDJSON readers are.
            let processes = min(4, subscribers)
            readers = try (0..<processes).map { p in
                let n = subscribers / processes + (p < subscribers % processes ? 1 : 0)
                return try Child(self.python, ["scripts/bench/ws_readers.py", "--unix", "\(dir)/face.sock", "--connections", "\(n)", "--count", "\(messages)"])
            }
        } else {
            readers = try startReaders(
                bin: self.builds.bin, socket: socket, subscribers: subscribers, extra: ["--idle", "600"] + (hold.map { ["--send", $0] } ?? []))
        }
        for r in readers { _ = try await r.waitLine(seconds: 300) { $0 == "ready" } }
        if self.routed, let answer = Self.answers[self.protocol] { generator.send("sendx \(answer)") }
        generator.send(
            "flood \(messages) \(self.size) 0\((self.routed && self.protocol == "json") || self.shape == "json" ? " 1" : "") \(self.shape ?? self.protocol)")
        for r in readers { _ = try await r.waitLine(seconds: 3600) { $0.hasPrefix("{") } }
        await bridge.stopAndWait()
        for r in readers { await r.stopAndWait(kill: true) }
        return try Self.parse(out)
    }

    /// The totals of a callgrind output file: the summary, and the self costs of its functions by
    /// phase.
    static func parse(_ path: String) throws -> [String: Int] {
        let profile = try CallgrindProfile(path: path)
        var totals: [String: Int] = [:]
        for (name, cost) in profile.selfCost { totals[Self.phase(of: name), default: 0] += cost }
        if let total = profile.total { totals["total"] = total }
        return totals
    }

    /// The phase a function's (mangled or C) name belongs to.
    static func phase(of name: String) -> String {
        func any(_ parts: [String]) -> Bool { parts.contains { name.contains($0) } }
        if any(["inflate", "Inflate", "CompressNIO", "deflate", "Deflate", "adler32", "crc32"]) { return "inflate" }
        if any(["WebSocketFrame", "ByteToMessage", "UTF8Validator", "UpstreamFrameHandler", "NIOWebSocket", "cwsb_ascii"]) {
            return "framing"
        }
        if any([
            "Fanout", "MessageLine", "SubscriberQueue", "LocalClient", "LocalPlane", "ReplayRing", "JSONValueEncoder", "Bridge", "JSONWriter", "LineBatch",
            "TimestampDigits", "cwsb_json",
        ]) {
            return "fan-out"
        }
        if any(["writev", "PendingWrites", "PendingStreamWrites", "flushNow", "__libc_write", "sendmsg"]) { return "writes" }
        if any(["readFromSocket", "readIfNeeded", "RecvByteBuffer", "__libc_read", "recvmsg", "NIOSSL", "SSL_"]) || name == "read" {
            return "read"
        }
        if any([
            "swift_retain", "swift_release", "swift_bridgeObject", "swift_allocObject", "swift_dealloc", "malloc", "free", "_int_", "memcpy", "memmove",
            "memset",
        ]) {
            return "runtime"
        }
        return "other"
    }
}

enum Command {
    /// Runs a program to its end; its exit status. `quiet`: its output is discarded.
    static func run(_ path: String, _ arguments: [String], quiet: Bool = false) throws -> Int32 {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: path)
        p.arguments = arguments
        if quiet { p.standardOutput = FileHandle.nullDevice }
        try p.run()
        p.waitUntilExit()
        return p.terminationStatus
    }
}
