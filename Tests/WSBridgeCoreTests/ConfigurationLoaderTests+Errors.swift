import Foundation
import Testing
import WSBridgeProtocol

@testable import WSBridgeCore

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
        #expect(sections.count == 15)
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

extension ConfigurationLoaderTests {
    @Test func theUpstreamsLimitsAreATableOfTheirOwn() throws {
        let config = try self.load(
            """
            [upstream]
            url = "ws://127.0.0.1:9/"
            [upstream.limits]
            messages_per_second = 5
            burst = 2
            count_pings = true
            connect_attempts = "300/5m"
            """)
        let limits = config.upstream.limits
        #expect(limits.messagesPerSecond == 5 && limits.burst == 2 && limits.countPings)
        #expect(limits.connectAttempts == .init(limit: 300, window: .seconds(300)))
        #expect(limits.connectAttempts?.description == "300/300s")
        // Each key is its own for a reload, used from the next connection.
        #expect(config.fileKeys["upstream.limits.messages_per_second"]?.reload == .nextConnection)
        #expect(config.fileKeys["upstream.limits"] == nil)
        // A fraction is a rate too; 0 and "" are off.
        #expect(try self.load("[upstream.limits]\nmessages_per_second = 0.5\n").upstream.limits.messagesPerSecond == 0.5)
        let off = try self.load("[upstream.limits]\nmessages_per_second = 0\nconnect_attempts = \"\"\n").upstream.limits
        #expect(off.messagesPerSecond == nil && off.connectAttempts == nil)
    }

    @Test func aMistakeInTheLimitsNamesItsKeyAndSaysWhatToWrite() {
        let attempts = self.failure("[upstream.limits]\nconnect_attempts = \"300 per 5m\"\n")
        #expect(attempts?.key == "upstream.limits.connect_attempts")
        #expect(attempts?.description.contains(#"e.g. "300/5m""#) == true, "\(String(describing: attempts))")
        #expect(self.failure("[upstream.limits]\nconnect_attempts = \"0/5m\"\n")?.key == "upstream.limits.connect_attempts")
        #expect(self.failure("[upstream.limits]\nmessages_per_second = -1\n")?.key == "upstream.limits.messages_per_second")
        #expect(self.failure("[upstream.limits]\nburst = 0\n")?.key == "upstream.limits.burst")
        let unknown = self.failure("[upstream.limits]\nmessages_per_secnd = 5\n")
        #expect(unknown?.key == "upstream.limits.messages_per_secnd")
        #expect(unknown?.description.contains(#"did you mean "messages_per_second"?"#) == true, "\(String(describing: unknown))")
        let notATable = self.failure("[upstream]\nlimits = 5\n")
        #expect(notATable?.description.contains("write it as [upstream.limits]") == true, "\(String(describing: notATable))")
    }
}

extension ConfigurationLoaderTests {
    @Test func aRenewalIsSetByALifetimeANoticeAndThePathsThatTellMessagesApart() throws {
        let config = try self.load(
            """
            [upstream]
            url = "ws://127.0.0.1:9/"
            max_lifetime = "23h50m"
            renew_when = "event=closing"
            dedupe = ["stream", "data.u"]
            """)
        let upstream = config.upstream
        #expect(upstream.maxLifetime == .seconds(23 * 3600 + 50 * 60))
        #expect(upstream.renewWhen?.field == "event" && upstream.dedupe == ["stream", "data.u"])
        // The jitter: 1 % of the lifetime unless set.
        #expect(upstream.effectiveRenewJitter == .seconds((23 * 3600 + 50 * 60) / 100))
        #expect(upstream.renewTimeout == .seconds(30) && upstream.dedupeWindow == 65_536)
        #expect(config.fileKeys["upstream.max_lifetime"]?.reload == .nextConnection)
        #expect(try self.load("[upstream]\nmax_lifetime = \"1h\"\nrenew_jitter = \"0s\"\n").upstream.effectiveRenewJitter == .zero)
        // Durations with more than one unit add up, as Go's do.
        #expect(try self.load("[upstream]\nrenew_timeout = \"1m30s\"\n").upstream.renewTimeout == .seconds(90))
        #expect(self.failure("[upstream]\nrenew_timeout = \"1m30\"\n")?.key == "upstream.renew_timeout")
        #expect(self.failure("[upstream]\ndedupe = [\"data..u\"]\n")?.key == "upstream.dedupe")
        #expect(self.failure("[upstream]\ndedupe = \"stream\"\n")?.description.contains(#"["stream", "data.u"]"#) == true)
        #expect(self.failure("[upstream]\nrenew_when = \"=x\"\n")?.key == "upstream.renew_when")
        #expect(self.failure("[upstream]\ndedupe_window = 1\n")?.key == "upstream.dedupe_window")
    }
}

extension ConfigurationLoaderTests {
    @Test func aPoolIsSetBySubscriptionsPerConnectionAndItsMostConnections() throws {
        let config = try self.load("[upstream]\nsubscriptions_per_connection = 1024\nconnections = 5\nsubscription_weight = \"params\"\n")
        #expect(config.upstream.subscriptionsPerConnection == 1024 && config.upstream.connections == 5)
        #expect(config.upstream.subscriptionWeight == "params")
        #expect(config.fileKeys["upstream.subscriptions_per_connection"]?.reload == .restart)
        #expect(try self.load("[upstream]\nsubscriptions_per_connection = 0\n").upstream.subscriptionsPerConnection == nil)
        #expect(self.failure("[upstream]\nconnections = 0\n")?.key == "upstream.connections")
        // With a protocol too: each connection gets its protocol layer.
        let withProtocol = try self.load("[upstream]\nprotocol = \"graphql-transport-ws\"\nsubscriptions_per_connection = 10\n")
        #expect(withProtocol.upstream.subscriptionsPerConnection == 10 && withProtocol.applicationProtocol.kind == .graphqlTransportWS)
    }
}
