import Testing

@testable import WSBridgeCore

extension ConfigurationLoaderTests {
    @Test func aFleetIsReadWithItsDefaults() throws {
        let config = try self.load("[fleet]\nservers = [\"nats://10.0.0.1:4222\", \"tls://n2:4222\"]\ntoken = \"s3cret\"\nsubject = \"feed.binance\"\n")
        #expect(config.fleet.servers == ["nats://10.0.0.1:4222", "tls://n2:4222"] && config.fleet.isOn)
        #expect(config.fleet.token == "s3cret" && config.fleet.user == nil && config.fleet.credentials == nil)
        #expect(config.fleet.stream == "WSBRIDGE" && config.fleet.subject == "feed.binance" && config.fleet.maxInFlight == 1024)
        #expect(try self.load("").fleet == Configuration.Fleet() && !Configuration.Fleet().isOn)
        #expect(config.fleet.role == .bridge && config.fleet.requests == "wsbridge-requests.WSBRIDGE")
    }

    @Test func aHotStandbyTakesItsIdsFromUpstreamDedupe() throws {
        let config = try self.load(
            "[upstream]\nurl = \"ws://h/\"\ndedupe = [\"s\", \"E\"]\n[fleet]\nservers = [\"nats://n1:4222\"]\nstandby = \"hot\"\nlease_ttl = \"3s\"\n")
        #expect(config.fleet.standby == .hot && config.fleet.leaseTTL == .seconds(3) && config.fleet.leaseBucket == "wsbridge-leases")
    }

    @Test func batchesAreForColdStandbysAndSingleBridges() throws {
        let cold = try self.load("[upstream]\nurl = \"ws://h/\"\n[fleet]\nservers = [\"nats://n1:4222\"]\nstandby = \"cold\"\nbatch = 500\n")
        #expect(cold.fleet.batch == 500)
        #expect(try self.load("[upstream]\nurl = \"ws://h/\"\n[fleet]\nservers = [\"nats://n1:4222\"]\n").fleet.batch == 1)
        let hot = "[upstream]\nurl = \"ws://h/\"\ndedupe = [\"s\"]\n[fleet]\nservers = [\"nats://n1:4222\"]\nstandby = \"hot\"\nbatch = 10\n"
        #expect {
            try self.load(hot)
        } throws: { error in
            "\(error)".contains("fleet.batch") && "\(error)".contains("must be 1 with standby = \"hot\"")
        }
    }

    @Test func aFollowerTakesSubjectsWithWildcards() throws {
        // No [upstream]: a follower's is the stream.
        let config = try self.load("[fleet]\nrole = \"follower\"\nservers = [\"nats://n1:4222\"]\nstream = \"FEED\"\nsubject = \"feed.*.>\"\n")
        #expect(config.fleet.role == .follower && config.fleet.subject == "feed.*.>")
        #expect(config.fleet.requests == "wsbridge-requests.FEED")
        let strict = ConfigurationLoader(fileName: "d.toml", requiresURL: true)
        #expect(throws: Never.self) { try strict.load(text: "[fleet]\nrole = \"follower\"\nservers = [\"nats://n1:4222\"]\n") }
        #expect(throws: ConfigurationError.self) { try strict.load(text: "[fleet]\nservers = [\"nats://n1:4222\"]\n") }
    }

    @Test func aFleetsMistakesSayWhatToWrite() {
        let cases: [(String, String, String)] = [
            ("servers = [\"http://n1:4222\"]", "fleet.servers", "must be nats://HOST:PORT or tls://HOST:PORT"),
            ("servers = [\"nats://n1\"]\nuser = \"u\"", "fleet.user", "fleet.user and fleet.password go together"),
            ("servers = [\"nats://n1\"]\ntoken = \"t\"\ncredentials = \"/etc/x.creds\"", "fleet.token", "set one way to log in to NATS"),
            ("servers = [\"nats://n1\"]\nsubject = \"feed.*\"", "fleet.subject", "is where a bridge publishes, so it takes no wildcards"),
            ("servers = [\"nats://n1\"]\nrole = \"leader\"", "fleet.role", "must be \"bridge\""),
            ("servers = [\"nats://n1\"]\nrole = \"follower\"\nsubject = \"a.>.b\"", "fleet.subject", "none empty"),
            ("servers = [\"nats://n1\"]\nrequests = \"r.*\"", "fleet.requests", "without wildcards"),
            ("servers = [\"nats://n1\"]\nsubject = \"f.${msg:s\"", "fleet.subject", "has a ${ that is not ${msg:PATH}"),
            ("servers = [\"nats://n1\"]\nrole = \"follower\"\nsubject = \"f.${msg:s}\"", "fleet.subject", "takes ${msg:PATH} on a bridge only"),
            ("servers = [\"nats://n1\"]\nstandby = \"warm\"", "fleet.standby", "must be \"none\""),
            ("servers = [\"nats://n1\"]\nstandby = \"hot\"", "fleet.standby", "\"hot\" needs upstream.dedupe"),
            ("servers = [\"nats://n1\"]\nrole = \"follower\"\nstandby = \"cold\"", "fleet.standby", "is for bridges"),
            ("servers = [\"nats://n1\"]\nlease_ttl = \"500ms\"", "fleet.lease_ttl", "at least \"1s\""),
            ("servers = [\"nats://n1\"]\nlease_bucket = \"a.b\"", "fleet.lease_bucket", "letters, digits"),
            ("servers = [\"nats://n1\"]\nsubject = \"feed..x\"", "fleet.subject", "none empty"),
            ("servers = [\"nats://n1\"]\nstream = \"a.b\"", "fleet.stream", "none of space . * >"),
            ("servers = [\"nats://n1\"]\ncert_file = \"/c.pem\"", "fleet.cert_file", "go together"),
            ("stream = \"FEED\"", "fleet.servers", "is empty, so the other [fleet] keys do nothing"),
            ("servers = [\"nats://n1\"]\nmax_in_flight = 0", "fleet.max_in_flight", "from 1 to 65536"),
            ("servers = [\"nats://n1\"]\nbatch = 0", "fleet.batch", "from 1 (no batches) to 1000"),
            ("servers = [\"nats://n1\"]\nbatch = 1001", "fleet.batch", "from 1 (no batches) to 1000"),
        ]
        for (text, key, says) in cases {
            let error = self.failure("[fleet]\n" + text + "\n")
            #expect(error?.key == key && error?.description.contains(says) == true, "\(text): \(String(describing: error))")
        }
    }
}
