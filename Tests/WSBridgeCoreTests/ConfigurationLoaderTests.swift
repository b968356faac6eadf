import Foundation
import Testing
import WSBridgeProtocol

@testable import WSBridgeCore

@Suite struct ConfigurationLoaderTests {
    let loader = ConfigurationLoader(fileName: "test.toml")

    func load(_ text: String) throws(ConfigurationError) -> Configuration {
        try self.loader.load(text: text)
    }

    /// Loads and expects an error; returns it for inspection.
    func failure(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) -> ConfigurationError? {
        do {
            _ = try self.loader.load(text: text)
            Issue.record("expected a configuration error", sourceLocation: sourceLocation)
            return nil
        } catch {
            return error
        }
    }

    /// Every mistake in one run, in file order: two in one section, an unknown section between
    /// sections read later, a cross-key check, and an unknown key.
    @Test func everyMistakeIsReportedInFileOrder() throws {
        let error = try #require(
            self.failure(
                """
                [local]
                mode = 660
                max_line = 3

                [heartbeat]
                interval = "soon"

                [bogus]
                x = 1

                [tls]
                cert_file = "/etc/c.pem"

                [upstream]
                url = "ws://127.0.0.1:1/"
                colour = "blue"
                """))
        let lines = error.description.split(separator: "\n").map(String.init)
        #expect(lines.count == 6, "\(lines)")
        #expect(lines.compactMap { $0.split(separator: ":").dropFirst().first.map(String.init) } == ["2", "3", "6", "8", "11", "16"], "\(lines)")
        #expect(lines[0].hasPrefix("test.toml:2: local.mode = 660: write the permissions as a string"))
        #expect(lines[1].hasPrefix("test.toml:3: local.max_line = 3: out of range"))
        #expect(lines[3].hasPrefix("test.toml:8: bogus: unknown section"))
        // The pair is missing its key_file: located at the [tls] header.
        #expect(lines[4].contains("tls.cert_file and tls.key_file go together"))
        #expect(lines[5].hasPrefix("test.toml:16: upstream.colour = \"blue\": unknown key"))
        #expect(error.line == 2 && error.further.count == 5)
    }

    @Test func shippedExampleParsesToTheDefaults() throws {
        let path = #filePath.split(separator: "/").dropLast(3).joined(separator: "/")
        let text = try String(contentsOfFile: "/\(path)/etc/wsbridged.toml", encoding: .utf8)
        var config = try self.load(text)
        // It sets keys (what a reload compares), each to its default.
        #expect(config.fileKeys["upstream.url"]?.value == #""ws://127.0.0.1:8080/""#)
        config.fileKeys = [:]
        #expect(config == Configuration())
    }

    @Test func fullConfiguration() throws {
        let config = try self.load(
            """
            [upstream]
            url = "wss://feed.example.test:8443/stream?x=1"
            subprotocols = ["v2.feed", "v1.feed"]
            compression = false
            max_message_size = 1048576
            connect_timeout = 3
            connect_on_start = false
            [upstream.headers]
            "X-Client" = "wsbridge"
            [auth]
            token_file = "/run/credentials/wsbridged.service/token"
            [tls]
            ca_file = "/etc/ssl/ca.pem"
            cert_file = "/etc/wsbridge/client.pem"
            key_file = "/etc/wsbridge/client.key"
            server_name = "feed.internal"
            [proxy]
            url = "socks5://127.0.0.1:1080"
            [heartbeat]
            interval = "500ms"
            deadline = 0.25
            text = "ping"
            [backoff]
            base = "1s"
            cap = "2m"
            stable_after = "0s"
            max_attempts = 7
            [reachability]
            enabled = false
            poll_interval = "1h"
            [local]
            socket = "/tmp/x.sock"
            mode = "0600"
            group = "wsbridge"
            [log]
            level = "DEBUG"
            """
        )
        #expect(config.upstream.url == UpstreamURL(scheme: .wss, host: "feed.example.test", port: 8443, path: "/stream?x=1"))
        #expect(config.upstream.subprotocols == ["v2.feed", "v1.feed"])
        #expect(config.upstream.compression == false)
        #expect(config.upstream.maxMessageSize == 1_048_576)
        #expect(config.upstream.connectTimeout == .seconds(3))
        #expect(!config.upstream.connectOnStart)
        #expect(config.upstream.headers.map(\.name) == ["X-Client"])
        #expect(config.upstream.headers.map(\.value) == ["wsbridge"])
        #expect(config.auth.tokenFile == "/run/credentials/wsbridged.service/token")
        #expect(config.tls.caFile == "/etc/ssl/ca.pem")
        #expect(config.tls.serverName == "feed.internal")
        #expect(config.proxy.url == ProxyURL(kind: .socks5, host: "127.0.0.1", port: 1080))
        #expect(config.heartbeat.interval == .milliseconds(500))
        #expect(config.heartbeat.deadline == .milliseconds(250))
        #expect(config.heartbeat.text == "ping")
        #expect(config.backoff.policy == BackoffPolicy(base: .seconds(1), cap: .seconds(120), stableAfter: .zero))
        #expect(config.backoff.maxAttempts == 7)
        #expect(config.reachability.enabled == false)
        #expect(config.reachability.pollInterval == .seconds(3600))
        #expect(config.local.mode == 0o600)
        #expect(config.local.group == "wsbridge")
        #expect(config.log.level == .debug)
    }

    @Test func emptyFileGivesDefaults() throws {
        #expect(try self.load("") == Configuration())
    }

    @Test func syntaxErrorNamesLineAndColumn() {
        let e = self.failure("[upstream]\nurl = \"ws://a\"\nbroken = = 1\n")
        #expect(e?.line == 3)
        #expect(e?.column != nil)
        #expect(e?.description.hasPrefix("test.toml:3:") == true)
        #expect(e?.problem.contains("TOML syntax error") == true)
    }

    struct BadValue: Sendable, CustomTestStringConvertible {
        var toml: String
        var key: String
        var line: Int
        var mentions: String
        var testDescription: String { self.key }
    }

    static let badValues: [BadValue] = [
        .init(toml: "[upstream]\nurl = \"http://x/\"", key: "upstream.url", line: 2, mentions: "use ws:// or wss://"),
        .init(toml: "[upstream]\nurl = \"ws://:80/\"", key: "upstream.url", line: 2, mentions: "missing host"),
        .init(toml: "[upstream]\nurl = \"ws://h:99999/\"", key: "upstream.url", line: 2, mentions: "1 to 65535"),
        .init(toml: "[upstream]\nurl = \"wss://u:p@h/\"", key: "upstream.url", line: 2, mentions: "auth.token_file"),
        .init(toml: "[upstream]\nurl = 5", key: "upstream.url", line: 2, mentions: "must be a string"),
        .init(toml: "[upstream]\nsubprotocols = \"v1\"", key: "upstream.subprotocols", line: 2, mentions: "array of strings"),
        .init(toml: "[upstream]\nsubprotocols = [\"a b\"]", key: "upstream.subprotocols", line: 2, mentions: "HTTP token"),
        .init(toml: "[upstream]\ncompression = \"yes\"", key: "upstream.compression", line: 2, mentions: "true or false"),
        .init(toml: "[upstream]\nmax_message_size = 10", key: "upstream.max_message_size", line: 2, mentions: "125 to 1073741824"),
        .init(toml: "[upstream]\nconnect_timeout = \"soon\"", key: "upstream.connect_timeout", line: 2, mentions: "\"500ms\""),
        .init(toml: "[upstream.headers]\nHost = \"x\"", key: "upstream.headers.Host", line: 2, mentions: "set by wsbridged"),
        .init(toml: "[upstream.headers]\n\"Bad Name\" = \"x\"", key: "upstream.headers.Bad Name", line: 2, mentions: "invalid header name"),
        .init(toml: "[upstream.headers]\nX-A = 1", key: "upstream.headers.X-A", line: 2, mentions: "must be a string"),
        .init(toml: "[tls]\ncert_file = \"/c.pem\"", key: "tls.key_file", line: 1, mentions: "go together"),
        .init(toml: "[tls]\ninsecure = 1", key: "tls.insecure", line: 2, mentions: "true or false"),
        .init(toml: "[proxy]\nurl = \"ftp://p:1\"", key: "proxy.url", line: 2, mentions: "socks5://"),
        .init(toml: "[heartbeat]\ninterval = 0", key: "heartbeat.interval", line: 2, mentions: "> 0"),
        .init(toml: "[heartbeat]\ndeadline = -1", key: "heartbeat.deadline", line: 2, mentions: "> 0"),
        .init(toml: "[heartbeat]\n\ninterval = \"20 parsecs\"", key: "heartbeat.interval", line: 3, mentions: "\"20s\""),
        .init(toml: "[backoff]\nmax_attempts = -1", key: "backoff.max_attempts", line: 2, mentions: "0 for unlimited"),
        .init(toml: "[backoff]\nmax_attempts = 1.5", key: "backoff.max_attempts", line: 2, mentions: "whole number"),
        .init(toml: "[backoff]\nbase = 10\ncap = 5", key: "backoff.cap", line: 3, mentions: "at least backoff.base"),
        .init(toml: "[reachability]\npoll_interval = true", key: "reachability.poll_interval", line: 2, mentions: "duration"),
        .init(toml: "[local]\nmode = \"rw\"", key: "local.mode", line: 2, mentions: "octal"),
        .init(toml: "[local]\nmode = 660", key: "local.mode", line: 2, mentions: "mode = \"0660\""),
        .init(toml: "[log]\nlevel = \"loud\"", key: "log.level", line: 2, mentions: "trace, debug, info"),
        .init(toml: "[heartbeat]\nintervall = 5", key: "heartbeat.intervall", line: 2, mentions: "known keys in [heartbeat]: deadline, interval, text"),
        .init(toml: "[hearbeat]\ninterval = 5", key: "hearbeat", line: 1, mentions: "unknown section"),
        .init(toml: "upstream = 5", key: "upstream", line: 1, mentions: "must be a table"),
    ]

    @Test(arguments: Self.badValues)
    func everyValidationErrorIsLocatedAndExplained(_ bad: BadValue) {
        guard let e = self.failure(bad.toml) else { return }
        #expect(e.key == bad.key)
        #expect(e.line == bad.line)
        #expect(e.file == "test.toml")
        #expect(e.description.contains(bad.mentions), "\(e.description)")
        #expect(e.description.hasPrefix("test.toml:\(bad.line): \(bad.key)"))
    }

    @Test func badValueIsQuotedInTheMessage() {
        let e = self.failure("[log]\nlevel = \"loud\"")
        #expect(e?.description == "test.toml:2: log.level = \"loud\": one of trace, debug, info, notice, warning, error, critical")
    }
    /// graphql-transport-ws: its handshake is the first opening message (the token filled in at
    /// each connect), its acknowledgement the ready gate, its subprotocol offered.
    @Test func theProtocolBringsItsHandshakeReadyGateAndSubprotocol() throws {
        let config = try self.load(
            "[upstream]\nprotocol = \"graphql-transport-ws\"\non_open = ['{\"x\":1}']\n[auth]\ntoken_file = \"/t\"\n[protocol]\ninit_payload = '{\"token\":\"${token}\"}'\nmax_per_app = 5\n"
        )
        #expect(config.applicationProtocol.kind == .graphqlTransportWS && config.applicationProtocol.maxPerApp == 5)
        #expect(config.upstream.onOpen.map(\.template) == [#"{"type":"connection_init","payload":{"token":"${token}"}}"#, #"{"x":1}"#])
        #expect(config.upstream.readyWhen == Filter(parsing: "type=connection_ack"))
        #expect(config.upstream.subprotocols == ["graphql-transport-ws"])
        #expect(try self.load("[upstream]\nprotocol = \"jsonrpc\"\n").applicationProtocol.kind == .jsonrpc)
    }

    /// The text protocols: their handshakes as opening messages (credentials' ${token} filled in
    /// at each connect), their acknowledgements as ready gates.
    @Test func theTextProtocolsBringTheirHandshakes() throws {
        let io = try self.load(
            "[upstream]\nprotocol = \"socketio\"\n[auth]\ntoken_file = \"/t\"\n[protocol]\nnamespace = \"/feed\"\nauth = '{\"token\":\"${token}\"}'\n")
        #expect(io.upstream.onOpen.map(\.template) == [#"40/feed,{"token":"${token}"}"#])
        #expect(io.upstream.readyWhen == Filter(.prefix("40/feed,")))
        let stomp = try self.load(
            "[upstream]\nprotocol = \"stomp\"\n[auth]\ntoken_file = \"/t\"\n[protocol]\nlogin = \"guest\"\npasscode = \"${token}\"\nheart_beat = \"5000, 0\"\n")
        #expect(stomp.upstream.onOpen.map(\.template) == ["CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:${token}\nheart-beat:5000,0\n\n\0"])
        #expect(stomp.upstream.readyWhen == Filter(.prefix("CONNECTED")) && stomp.upstream.subprotocols == ["v12.stomp"])
        let nats = try self.load("[upstream]\nprotocol = \"nats\"\n[protocol]\nuser = \"u\"\npass = \"p\\\"q\"\nname = \"edge-1\"\n")
        let connect = try #require(nats.upstream.onOpen.first?.template)
        #expect(connect.hasPrefix(#"CONNECT {"verbose":false,"pedantic":false,"#) && connect.contains(#""name":"edge-1","user":"u","pass":"p\"q"}"#))
        #expect(connect.hasSuffix("\r\nSUB \(NATS.processInbox)* 0\r\nPING\r\n"))
        #expect(nats.upstream.readyWhen == Filter(.contains("PONG\r\n")) && nats.heartbeat.text == "PING\r\n")
    }

    /// json: the id's path and the keepalive replies.
    @Test func jsonTakesItsIdPathAndReplies() throws {
        let config = try self.load(
            "[upstream]\nprotocol = \"json\"\n[protocol]\nid = \"meta.rid\"\n[[protocol.reply]]\nwhen = \"ping\"\nsend = '{\"pong\":${msg:ping}}'\n[[protocol.reply]]\nwhen = \"op=hb\"\nsend = '{\"op\":\"hb\"}'\n"
        )
        let settings = config.applicationProtocol
        #expect(settings.kind == .json && settings.idPath == "meta.rid")
        #expect(settings.replies.map(\.when) == [Filter(parsing: "ping"), Filter(parsing: "op=hb")])
        #expect(settings.replies.first?.send.render(["ping": 42]) == ["pong": 42])
    }

    @Test(arguments: [
        ("[upstream]\nprotocol = \"mqtt\"", "upstream.protocol", "one of raw, json, jsonrpc, graphql-transport-ws"),
        ("[upstream]\nprotocol = \"jsonrpc\"\n[protocol]\nid = \"rid\"", "protocol.id", "not of \"jsonrpc\""),
        ("[upstream]\nprotocol = \"json\"\n[protocol]\nid = \"a..b\"", "protocol.id", "dotted"),
        ("[upstream]\nprotocol = \"json\"\n[[protocol.reply]]\nwhen = \"ping\"", "protocol.reply", "needs both when"),
        ("[upstream]\nprotocol = \"json\"\n[[protocol.reply]]\nwhen = \"ping\"\nsend = '{\"pong\":${msg:ping}'", "protocol.reply.send", "is not JSON"),
        (
            "[upstream]\nprotocol = \"json\"\n[[protocol.reply]]\nwhen = \"ping\"\nsend = '{\"pong\":${ping}}'", "protocol.reply.send",
            "unknown placeholder ${ping}"
        ),
        ("[upstream]\nprotocol = \"json\"\n[[protocol.reply]]\nwhen = \"ping\"\nsend = '{}'\nevery = 1", "protocol.reply.every", "unknown key"),
        ("[upstream]\nprotocol = \"socket.io\"", "upstream.protocol", "did you mean \"socketio\""),
        ("[upstream]\nprotocol = \"nats\"\n[protocol]\nlogin = \"guest\"", "protocol.login", "a setting of upstream.protocol = \"stomp\", not of \"nats\""),
        ("[upstream]\nprotocol = \"stomp\"\n[protocol]\nheart_beat = \"10s\"", "protocol.heart_beat", "two counts of milliseconds"),
        ("[upstream]\nprotocol = \"socketio\"\n[protocol]\nnamespace = \"chat\"", "protocol.namespace", "starts with /"),
        ("[upstream]\nprotocol = \"socketio\"\n[protocol]\nauth = '{token}'", "protocol.auth", "must be JSON text"),
        ("[upstream]\nprotocol = \"jsonrpc\"\n[protocol]\ninit_payload = '{}'", "protocol.init_payload", "not of \"jsonrpc\""),
        ("[upstream]\nprotocol = \"graphql-transport-ws\"\n[protocol]\ninit_payload = '{token'", "protocol.init_payload", "must be JSON text"),
        ("[protocol]\nmax_total = 0", "protocol.max_total", "a count from 1"),
        ("[upstream]\nprotocol = \"jsonrpc\"\n[journal]\ndir = \"/var/lib/wsbridged/journal\"", "journal.dir", "cannot be set with upstream.protocol"),
        ("[protocol]\nbogus = 1", "protocol.bogus", "unknown key"),
    ])
    func protocolMistakesNameTheKeyAndTheFix(_ toml: String, _ key: String, _ mentions: String) throws {
        let error = try #require(self.failure(toml))
        #expect(error.key == key, "\(error)")
        #expect(error.description.contains(mentions), "\(error)")
    }
}

@Suite struct UpstreamURLTests {
    @Test func parsesForms() throws {
        #expect(try UpstreamURL(parsing: "ws://h") == UpstreamURL(scheme: .ws, host: "h", port: 80, path: "/"))
        #expect(try UpstreamURL(parsing: "WSS://h?q=1") == UpstreamURL(scheme: .wss, host: "h", port: 443, path: "/?q=1"))
        #expect(try UpstreamURL(parsing: "ws://[::1]:9/a#frag") == UpstreamURL(scheme: .ws, host: "::1", port: 9, path: "/a"))
        #expect(try UpstreamURL(parsing: "ws://[::1]:9/a").hostHeader == "[::1]:9")
        #expect(try UpstreamURL(parsing: "wss://h:443/").hostHeader == "h")
        #expect(try UpstreamURL(parsing: "ws://h:8080/x").description == "ws://h:8080/x")
    }

    @Test func proxyFromEnvironment() throws {
        let wss = try UpstreamURL(parsing: "wss://feed.test/")
        let ws = try UpstreamURL(parsing: "ws://feed.test/")
        #expect(ProxyURL.fromEnvironment(["https_proxy": "http://127.0.0.1:8888"], for: wss) == ProxyURL(kind: .httpConnect, host: "127.0.0.1", port: 8888))
        #expect(ProxyURL.fromEnvironment(["HTTPS_PROXY": "127.0.0.1:8888"], for: wss) == ProxyURL(kind: .httpConnect, host: "127.0.0.1", port: 8888))
        #expect(ProxyURL.fromEnvironment(["https_proxy": "http://127.0.0.1:8888"], for: ws) == nil)
        #expect(ProxyURL.fromEnvironment(["all_proxy": "socks5://127.0.0.1"], for: ws) == ProxyURL(kind: .socks5, host: "127.0.0.1", port: 1080))
        #expect(ProxyURL.fromEnvironment(["all_proxy": "socks5://127.0.0.1", "no_proxy": "localhost,.test"], for: ws) == nil)
        #expect(ProxyURL.fromEnvironment(["all_proxy": "socks5://127.0.0.1", "NO_PROXY": "*"], for: ws) == nil)
        #expect(ProxyURL.fromEnvironment(["all_proxy": "socks5://127.0.0.1", "no_proxy": "other.test"], for: ws) != nil)
    }
}

@Suite struct LocalPlaneConfigurationTests {
    let loader = ConfigurationLoader(fileName: "t.toml")

    @Test func localQueueAndAccessOptions() throws {
        let c = try self.loader.load(
            text: """
                [local]
                max_line = 4096
                subscriber_queue = 10
                subscriber_queue_bytes = 2048
                replay = 0
                replay_bytes = 65536
                inline_json = true
                max_clients = 20
                client_output_bytes = 8192
                send_buffer_bytes = 0
                max_pending_requests = 2
                max_pending_requests_total = 3
                filter_max_bytes = 32
                filter_max_depth = 4
                [queue]
                max_messages = 5
                max_bytes = 100
                [access]
                write_uids = [1000, 1001]
                write_groups = ["wsbridge"]
                """
        )
        #expect(c.local.maxLine == 4096)
        #expect(c.local.subscriberQueue == 10)
        #expect(c.local.subscriberQueueBytes == 2048)
        #expect(c.local.replay == 0)
        #expect(c.local.replayBytes == 65536)
        #expect(c.local.inlineJSON)
        #expect(c.local.maxClients == 20)
        #expect(c.local.clientOutputBytes == 8192)
        #expect(c.local.sendBufferBytes == 0)
        #expect(c.local.maxPendingRequests == 2)
        #expect(c.local.maxPendingRequestsTotal == 3)
        #expect(c.local.filterMaxBytes == 32)
        #expect(c.local.filterMaxDepth == 4)
        #expect(c.queue.maxMessages == 5)
        #expect(c.queue.maxBytes == 100)
        #expect(c.queue.spool == nil)
        #expect(c.queue.fsync == .always)
        #expect(c.access.writeUIDs == [1000, 1001])
        #expect(c.access.writeGroups == ["wsbridge"])
    }

    @Test func theSpoolIsOffUnlessADirectoryIsGiven() throws {
        let on = try self.loader.load(text: "[queue]\nspool = \"/var/lib/wsbridged/spool\"\nfsync = \"batch\"\n")
        #expect(on.queue.spool == "/var/lib/wsbridged/spool")
        #expect(on.queue.fsync == .batch)
        let off = try self.loader.load(text: "[queue]\nspool = \"\"\n")
        #expect(off.queue.spool == nil)
    }

    @Test func theJournalIsOffUnlessADirectoryIsGivenAndReadsEveryKey() throws {
        let off = try self.loader.load(text: "")
        #expect(off.journal == Configuration.Journal())
        #expect(off.journal.dir == nil && off.journal.fsync == .batch && off.journal.maxBytes == 1 << 30)
        let on = try self.loader.load(
            text: """
                [journal]
                dir = "/var/lib/wsbridged/journal"
                max_bytes = 2097152
                max_age = "90m"
                segment_bytes = 65536
                fsync = "always"
                fsync_interval = "250ms"
                buffer_bytes = 1048576
                """)
        #expect(on.journal.dir == "/var/lib/wsbridged/journal")
        #expect(on.journal.maxBytes == 2_097_152)
        #expect(on.journal.maxAge == .seconds(5400))
        #expect(on.journal.segmentBytes == 65536)
        #expect(on.journal.fsync == .always)
        #expect(on.journal.fsyncInterval == .milliseconds(250))
        #expect(on.journal.bufferBytes == 1 << 20)
    }

    @Test(arguments: [
        ("[journal]\ndir = \"journal\"", "journal.dir", "absolute directory path"),
        ("[journal]\nfsync = \"never\"", "journal.fsync", "\"batch\" (fdatasync at most every journal.fsync_interval"),
        ("[journal]\nsegment_bytes = 100", "journal.segment_bytes", "from 65536"),
        ("[journal]\nmax_bytes = 2097152\nsegment_bytes = 4194304", "journal.segment_bytes", "larger than journal.max_bytes"),
        ("[journal]\nmax_age = 0", "journal.max_age", "a duration > 0"),
        ("[local]\nmax_line = 10", "local.max_line", "1024 to"),
        ("[local]\nsubscriber_queue = 0", "local.subscriber_queue", "from 1"),
        ("[queue]\nmax_messages = -1", "queue.max_messages", "0 (no queueing)"),
        ("[local]\nmax_clients = 0", "local.max_clients", "from 1"),
        ("[local]\nclient_output_bytes = 100", "local.client_output_bytes", "from 4096"),
        ("[local]\nsend_buffer_bytes = 100", "local.send_buffer_bytes", "0 (the system's default) or at least 4096"),
        ("[local]\nsend_buffer_bytes = 134217728", "local.send_buffer_bytes", "to 67108864"),
        ("[local]\nfilter_max_depth = 0", "local.filter_max_depth", "from 1"),
        ("[local]\nreplay_bytes = -1", "local.replay_bytes", "0 (off)"),
        ("[access]\nwrite_uids = 1000", "access.write_uids", "array of user ids"),
        ("[access]\nwrite_uids = [\"root\"]", "access.write_uids", "numeric user id"),
        ("[access]\nwrite_groups = [1]", "access.write_groups", "must be a string"),
        ("[queue]\nspool = \"var/lib/wsbridged\"", "queue.spool", "absolute directory path"),
        ("[queue]\nspool = 1", "queue.spool", "must be a string"),
        ("[queue]\nfsync = \"sometimes\"", "queue.fsync", "\"always\" (each queued send is fdatasync'd"),
    ])
    func errors(_ text: String, _ key: String, _ mentions: String) {
        do {
            _ = try self.loader.load(text: text)
            Issue.record("expected an error")
        } catch {
            #expect(error.key == key)
            #expect(error.description.contains(mentions), "\(error)")
        }
    }
}

// Friendly errors (issue 11).
extension ConfigurationLoaderTests {
    @Test func aMistypedKeyOrSectionGetsTheClosestKnownName() {
        let key = self.failure("[local]\nsubscriber_qeue = 5\n")
        #expect(key?.description.contains(#"unknown key (did you mean "subscriber_queue"?)"#) == true, "\(String(describing: key))")
        let section = self.failure("[upstrem]\nurl = \"ws://h/\"\n")
        #expect(section?.description.contains(#"unknown section (did you mean "upstream"?)"#) == true, "\(String(describing: section))")
        // Nothing close: no guess, only the list.
        let far = self.failure("[local]\ncolour = 1\n")
        #expect(far?.description.contains("did you mean") == false)
        #expect(far?.description.contains("known keys in [local]") == true)
    }

    @Test func anUnquotedModeIsAnsweredWithTheQuotedOne() {
        let error = self.failure("[local]\nmode = 660\n")
        #expect(error?.key == "local.mode")
        #expect(error?.description.contains(#"mode = "0660""#) == true, "\(String(describing: error))")
    }

    @Test func aURLWithoutSchemeSaysWhatToWrite() {
        let error = self.failure("[upstream]\nurl = \"127.0.0.1:18765\"\n")
        #expect(error?.description.contains("write ws://127.0.0.1:18765 (or wss://127.0.0.1:18765 for TLS)") == true, "\(String(describing: error))")
    }

    @Test func credentialsInAURLAreNeverEchoedBack() {
        let error = self.failure("[upstream]\nurl = \"wss://bob:hunter2@feed.example.test/x\"\n")
        #expect(error?.description.contains("hunter2") == false, "\(String(describing: error))")
        #expect(error?.description.contains("wss://***@feed.example.test/x") == true)
        #expect(UpstreamURL.redacted("ws://h/a@b") == "ws://h/a@b")
        #expect(UpstreamURL.redacted("ws://u:p@h:1?q=a@b") == "ws://***@h:1?q=a@b")
    }

    @Test func theMetricsEndpointAddress() throws {
        #expect(try self.load("[metrics]\nlisten = \"127.0.0.1:9464\"\n").metrics.listen == .init(host: "127.0.0.1", port: 9464))
        #expect(try self.load("[metrics]\nlisten = \"[::1]:0\"\n").metrics.listen == .init(host: "::1", port: 0))
        #expect(try self.load("[metrics]\nlisten = \"\"\n").metrics.listen == nil)
        for bad in ["9464", "::1:9464", "host:99999", ":9464"] {
            #expect(self.failure("[metrics]\nlisten = \"\(bad)\"\n")?.key == "metrics.listen", "\(bad)")
        }
    }

    @Test func fallbackURLsAndFailback() throws {
        let config = try self.load(
            """
            [upstream]
            url = "wss://primary.example/ws"
            fallback_urls = ["wss://backup1.example/ws", "ws://127.0.0.1:9000/"]
            failback_after = "10m"
            """
        )
        #expect(config.upstream.urls.map(\.description) == ["wss://primary.example/ws", "wss://backup1.example/ws", "ws://127.0.0.1:9000/"])
        #expect(config.upstream.failbackAfter == .seconds(600))
        let bad = self.failure("[upstream]\nfallback_urls = [\"wss://u:hunter2@b.example/\"]\n")
        #expect(bad?.key == "upstream.fallback_urls")
        #expect(bad?.description.contains("hunter2") == false, "\(String(describing: bad))")
        #expect(self.failure("[upstream]\nfallback_urls = \"wss://b/\"\n")?.description.contains("must be a list") == true)
    }
}

// The known keys are the ones the section readers ask for (issue 18): no second list.
extension ConfigurationLoaderTests {
    @Test func everySectionRefusesAKeyItsReaderDoesNotRead() {
        let sections = ConfigurationReader.readers.map { $0.name }
        #expect(sections.count == 14)
        for section in sections {
            let error = self.failure("[\(section)]\nno_such_key = 1\n")
            #expect(error?.key == "\(section).no_such_key", "\(String(describing: error))")
            #expect(error?.description.contains("known keys in [\(section)]") == true)
        }
    }

    @Test func theKnownKeysOfASectionAreExactlyWhatItsReaderAsksFor() {
        let error = self.failure("[heartbeat]\nbogus = 1\n")
        #expect(error?.description.contains("known keys in [heartbeat]: deadline, interval, text") == true, "\(String(describing: error))")
    }
}

// The operator is never locked out (issue 19).
extension ConfigurationLoaderTests {
    @Test func reservedClientsDefaultToFourAtMostOneBelowMaxClients() throws {
        #expect(try ConfigurationLoader(fileName: "t").load(text: "").local.reserved == 4)
        #expect(try ConfigurationLoader(fileName: "t").load(text: "[local]\nmax_clients = 3\n").local.reserved == 2)
        #expect(try ConfigurationLoader(fileName: "t").load(text: "[local]\nmax_clients = 10\nreserved_clients = 0\n").local.reserved == 0)
        let tooMany = self.failure("[local]\nmax_clients = 3\nreserved_clients = 3\n")
        #expect(tooMany?.key == "local.reserved_clients")
        #expect(tooMany?.description.contains("must be below local.max_clients (3)") == true, "\(String(describing: tooMany))")
    }
}

// Found by fuzzing (issue 19): these made TOMLKit's parser abort the process.
extension ConfigurationLoaderTests {
    @Test func aTableHeaderThatDoesNotStartWithANameIsAnErrorNotACrash() {
        for text in ["[!uth]\nx = 1\n", "[upstream]\nurl = \"ws://h/\"\n[ !x ]\n", "[[!x]]\n"] {
            let error = self.failure(text)
            #expect(error?.description.contains("a table header must start with a name") == true, "\(text): \(String(describing: error))")
        }
        // Inside a multi-line array or string a line may start with a bracket: not a header.
        let array = "[upstream]\nfallback_urls = [\n  \"ws://a/\",\n]\n[heartbeat]\ntext = '''\n[!not a header\n'''\n"
        #expect((try? self.load(array))?.heartbeat.text == "[!not a header\n")
    }
}

extension ConfigurationLoaderTests {
    @Test func theHeaderCheckReadsBytesNotCharacters() {
        // "[" with a combining mark after it is one Character; "\r\n" is one too.
        for text in ["[\u{0322}\"\n", "[upstream]\r\nurl = \"ws://h/\"\r\n[!x]\r\n"] {
            #expect(self.failure(text)?.description.contains("a table header must start with a name") == true, "\(text.debugDescription)")
        }
    }

    /// A relative path in the file is the file's folder's (the daemon's working directory is /
    /// under systemd); on the command line, the working directory's.
    @Test func relativePathsAreTheFilesFoldersOrTheWorkingDirectorys() throws {
        let config = try ConfigurationLoader(fileName: "/etc/wsbridge/feed.toml").load(
            text: "[auth]\ntoken_file = \"feed.token\"\n[tls]\nca_file = \"./certs/ca.pem\"\n[local]\nsocket = \"feed.sock\"\n")
        #expect(config.auth.tokenFile == "/etc/wsbridge/feed.token")
        #expect(config.local.socket == "/etc/wsbridge/feed.sock")
        #expect(config.tls.caFile == "/etc/wsbridge/certs/ca.pem")
        let cwd = FileManager.default.currentDirectoryPath
        #expect(try CommandLineSettings.path("ca.pem", flag: "--ca-file", key: "tls.ca_file") == "\(cwd)/ca.pem")
        #expect(try CommandLineSettings.path("./x/ca.pem", flag: "--ca-file", key: "tls.ca_file") == "\(cwd)/x/ca.pem")
        #expect(try CommandLineSettings.path("/abs/ca.pem", flag: "--ca-file", key: "tls.ca_file") == "/abs/ca.pem")
    }

    /// "A\u0000B" would load as "A" (TOMLKit hands strings over as C strings): refused, with its line.
    @Test(arguments: ["[upstream]\non_open = [\"A\\u0000B\"]\n", "[upstream]\n\non_open = [\"\"\"\nA\\U00000000\"\"\"]\n"])
    func aNULEscapeIsRefusedWithItsLine(_ text: String) throws {
        let error = try #require(self.failure(text))
        #expect(error.description.contains("a string holds \\u0000"), "\(error)")
        #expect(error.line == (text.contains("\"\"\"") ? 4 : 2), "\(error)")
    }

    /// The escape written as text (an escaped backslash, or in a literal string) is kept.
    @Test func aNULEscapeWrittenAsTextIsKept() throws {
        let config = try self.load("[upstream]\non_open = [\"A\\\\u0000B\", 'C\\u0000D']\n")
        #expect(config.upstream.onOpen.map(\.template) == ["A\\u0000B", "C\\u0000D"])
    }

    /// The daemon's file must name the upstream (an empty file is not "configuration OK").
    @Test func theDaemonsFileMustNameTheUpstream() throws {
        let strict = ConfigurationLoader(fileName: "wsbridged.toml", requiresURL: true)
        #expect(throws: ConfigurationError.self) { try strict.load(text: "") }
        do {
            _ = try strict.load(text: "[local]\nmode = \"0660\"\n")
        } catch {
            #expect(error.key == "upstream.url" && error.description.contains("is required"), "\(error)")
        }
        #expect(try strict.load(text: "[upstream]\nurl = \"ws://127.0.0.1:9/\"\n").upstream.url.port == 9)
    }

    @Test func settingsAreQuotedAsTheyAreWritten() {
        #expect(ConfigurationError.tomlString("type=\"connection_ack\"") == "'type=\"connection_ack\"'")
        #expect(ConfigurationError.tomlString("type=authed") == "\"type=authed\"")
        #expect(ConfigurationError.tomlString("a\"b'c") == "\"a\\\"b'c\"")
    }
}
