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
