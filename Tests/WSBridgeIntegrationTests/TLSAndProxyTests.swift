import Foundation
import Glibc
import Testing
import WSBridgeCore
import WSBridgeDaemon
import WSBridgeProtocol

/// wss with certificates made at test time, mutual TLS, SNI, and a real HTTP CONNECT proxy.
@Suite(.serialized) struct TLSAndProxyTests {
    let dir: TemporaryDirectory
    let certs: TestCertificates

    init() throws {
        self.dir = try TemporaryDirectory()
        self.certs = try TestCertificates(in: self.dir)
    }

    func tlsServer(_ extra: [String] = []) async throws -> UpstreamServer {
        try await UpstreamServer(.nio, arguments: ["--cert", self.certs.serverCert, "--key", self.certs.serverKey] + extra)
    }

    func config(_ server: UpstreamServer, host: String = "localhost") throws -> Configuration {
        var c = try LinkHarness.configuration(url: "wss://\(host):\(server.port)/secure")
        c.tls.caFile = self.certs.caCert
        return c
    }

    @Test func wssWithCAFileConnectsAndEchoes() async throws {
        let server = try await self.tlsServer()
        let link = try await LinkHarness(try self.config(server))
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        #expect(await link.state(.open) != nil, "\(link.events.text)")
        #expect(await server.event("sni localhost") != nil)
        #expect(try await link.send("over tls"))
        #expect(await link.events.wait(containing: "message text over tls") != nil)
    }

    @Test func wssWithoutTheCAIsRefused() async throws {
        let server = try await self.tlsServer()
        var config = try self.config(server)
        config.tls.caFile = nil
        let link = try await LinkHarness(config)
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        let failed = await link.state(.backingOff)
        // Said as what is wrong and which setting fixes it, not as BoringSSL's error stack.
        #expect(failed?.contains("the server's certificate is not trusted for localhost") == true, "\(link.events.text)")
        #expect(failed?.contains("set tls.ca_file") == true)
        #expect(failed?.contains("handshake.cc") == false)
    }

    @Test func theWrongSchemeForThePortSaysWhichToUse() async throws {
        // ws:// to a TLS port.
        let tlsServer = try await self.tlsServer()
        let plainLink = try await LinkHarness(try LinkHarness.configuration(url: "ws://localhost:\(tlsServer.port)/"))
        defer { Task { await plainLink.shutdown() } }
        plainLink.handle.connect()
        let toTLS = await plainLink.state(.backingOff)
        #expect(toTLS?.contains("use wss:// in upstream.url") == true, "\(plainLink.events.text)")

        // wss:// to a plain port.
        let plainServer = try await UpstreamServer(.nio)
        var config = try LinkHarness.configuration(url: "wss://localhost:\(plainServer.port)/")
        config.tls.caFile = self.certs.caCert
        let tlsLink = try await LinkHarness(config)
        defer { Task { await tlsLink.shutdown() } }
        tlsLink.handle.connect()
        let toPlain = await tlsLink.state(.backingOff)
        #expect(toPlain?.contains("the server did not answer TLS") == true && toPlain?.contains("use ws://") == true, "\(tlsLink.events.text)")
    }

    @Test func checkConfigLoadsTheTLSFilesAndNamesTheOneThatFails() throws {
        let missing = try self.dir.write("missing.toml", "[upstream]\nurl = \"wss://localhost/\"\n[tls]\nca_file = \"\(self.dir.file("nope.pem"))\"\n")
        let r = try spawnDaemonAndWait(["--check-config", "--config", missing])
        #expect(r.status == 78)
        #expect(r.stderr.contains("tls.ca_file \(self.dir.file("nope.pem")): no such file or directory"), "\(r.stderr)")

        let notPEM = try self.dir.write("notpem.toml", "[upstream]\nurl = \"wss://localhost/\"\n[tls]\nca_file = \"\(missing)\"\n")
        let bad = try spawnDaemonAndWait(["--check-config", "--config", notPEM])
        #expect(bad.status == 78)
        #expect(bad.stderr.contains("tls.ca_file \(missing): cannot read a PEM certificate from it"), "\(bad.stderr)")

        let good = try self.dir.write("good.toml", "[upstream]\nurl = \"wss://localhost/\"\n[tls]\nca_file = \"\(self.certs.caCert)\"\n")
        #expect(try spawnDaemonAndWait(["--check-config", "--config", good]).status == 0)
    }

    @Test func insecureSkipsVerification() async throws {
        let server = try await self.tlsServer()
        var config = try self.config(server)
        config.tls.caFile = nil
        config.tls.insecure = true
        let link = try await LinkHarness(config)
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        #expect(await link.state(.open) != nil, "\(link.events.text)")
    }

    @Test func mutualTLSAcceptsTheClientCertificate() async throws {
        let server = try await self.tlsServer(["--client-ca", self.certs.caCert])
        var config = try self.config(server)
        config.tls.certFile = self.certs.clientCert
        config.tls.keyFile = self.certs.clientKey
        let link = try await LinkHarness(config)
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        #expect(await link.state(.open) != nil, "\(link.events.text)")
    }

    @Test func mutualTLSRefusesAClientWithoutCertificate() async throws {
        let server = try await self.tlsServer(["--client-ca", self.certs.caCert])
        let link = try await LinkHarness(try self.config(server))
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        let failed = await link.state(.backingOff)
        #expect(failed != nil, "\(link.events.text)")
        #expect(await link.events.wait(timeout: .seconds(2), containing: "state open") == nil)
        #expect(await server.event("upgrade ", timeout: .milliseconds(500)) == nil)
    }

    func namedServer() async throws -> UpstreamServer {
        try await UpstreamServer(.nio, arguments: ["--cert", self.certs.namedCert, "--key", self.certs.namedKey])
    }

    @Test func serverNameOverridesSNIAndVerification() async throws {
        let server = try await self.namedServer()
        var config = try self.config(server, host: "127.0.0.1")
        config.tls.serverName = "feed.test"
        let link = try await LinkHarness(config)
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        #expect(await link.state(.open) != nil, "\(link.events.text)")
        #expect(await server.event("sni feed.test") != nil)
    }

    @Test func ipLiteralSendsNoSNIAndVerifiesTheIPAddress() async throws {
        let server = try await self.tlsServer()
        let link = try await LinkHarness(try self.config(server, host: "127.0.0.1"))
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        #expect(await link.state(.open) != nil, "\(link.events.text)")
        #expect(await server.event("sni none") != nil)
    }

    @Test func wrongServerNameFailsVerification() async throws {
        let server = try await self.namedServer()
        var config = try self.config(server)
        config.tls.serverName = "other.test"
        let link = try await LinkHarness(config)
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        let failed = await link.state(.backingOff)
        #expect(failed?.contains("other.test") == true, "\(link.events.text)")
        #expect(await server.event("sni other.test") != nil)
    }

    // MARK: - HTTP CONNECT proxy (Debian's tinyproxy)

    func startTinyproxy(basicAuth: String? = nil) async throws -> (ManagedProcess, Int, String) {
        let log = self.dir.file("tinyproxy.log")
        // tinyproxy logs to stderr in the foreground; it is ready once it listens.
        let (proxy, port) = try await startListening("tinyproxy") { port in
            let conf = try self.dir.write(
                "tinyproxy.conf",
                """
                Port \(port)
                Listen 127.0.0.1
                Timeout 60
                LogLevel Connect
                LogFile "\(log)"
                Allow 127.0.0.1
                MaxClients 10
                \(basicAuth.map { "BasicAuth \($0)" } ?? "")

                """
            )
            return try ManagedProcess("/usr/bin/tinyproxy", ["-d", "-c", conf], name: "tinyproxy")
        }
        return (proxy, port, log)
    }

    @Test func httpProxyCredentialsAreSentAsBasicAuthorization() async throws {
        let (proxy, port, log) = try await self.startTinyproxy(basicAuth: "feeduser s3cret")
        defer { proxy.stop() }
        let server = try await self.tlsServer()
        // Without credentials the proxy answers 407, and the failure says so.
        var refused = try self.config(server)
        refused.proxy.url = ProxyURL(parsing: "http://127.0.0.1:\(port)")
        let denied = try await LinkHarness(refused)
        defer { Task { await denied.shutdown() } }
        denied.handle.connect()
        let failed = await denied.state(.backingOff)
        #expect(failed?.contains("HTTP 407 Proxy Authentication Required: it wants credentials") == true, "\(denied.events.text)")
        await denied.shutdown()

        // With them (percent-encoded in the URL, as curl takes them), it carries the link.
        var config = try self.config(server)
        config.proxy.url = ProxyURL(parsing: "http://feeduser:s3cr%65t@127.0.0.1:\(port)")
        #expect(config.proxy.url?.password == "s3cret")
        #expect(config.proxy.url?.description.contains("s3cr") == false)
        let link = try await LinkHarness(config)
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        #expect(await link.state(.open) != nil, "\(link.events.text)")
        let logged = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(logged.contains("CONNECT localhost:\(server.port)"), "\(logged)")
        #expect(!link.events.text.contains("s3cret"))
    }

    @Test func socks5CredentialsAreSentAsUsernamePassword() async throws {
        let (proxy, port) = try await startListening("microsocks") { port in
            try ManagedProcess("/usr/bin/microsocks", ["-i", "127.0.0.1", "-p", "\(port)", "-u", "feeduser", "-P", "s3cret"], name: "microsocks")
        }
        defer { proxy.stop() }
        let server = try await self.tlsServer()

        // A wrong password: said as the proxy's refusal, not a silent fallback.
        var wrong = try self.config(server)
        wrong.proxy.url = ProxyURL(parsing: "socks5://feeduser:nope@127.0.0.1:\(port)")
        let refused = try await LinkHarness(wrong)
        defer { Task { await refused.shutdown() } }
        refused.handle.connect()
        let failed = await refused.state(.backingOff)
        #expect(failed?.contains("the SOCKS5 proxy refused the user name and password") == true, "\(refused.events.text)")
        await refused.shutdown()

        // No credentials against a proxy that wants them: the proxy's answer, said.
        var none = try self.config(server)
        none.proxy.url = ProxyURL(parsing: "socks5://127.0.0.1:\(port)")
        let anonymous = try await LinkHarness(none)
        defer { Task { await anonymous.shutdown() } }
        anonymous.handle.connect()
        #expect(await anonymous.state(.backingOff) != nil, "\(anonymous.events.text)")
        await anonymous.shutdown()

        var config = try self.config(server)
        config.proxy.url = ProxyURL(parsing: "socks5://feeduser:s3cret@127.0.0.1:\(port)")
        let link = try await LinkHarness(config)
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        #expect(await link.state(.open) != nil, "\(link.events.text)")
        #expect(try await link.send("via authenticated socks"))
        #expect(await link.events.wait(containing: "message text via authenticated socks") != nil)
        let logged = await proxy.stderr.wait(timeout: .seconds(5)) { $0.contains("connected to localhost:\(server.port)") }
        #expect(logged != nil, "\(proxy.stderr.text)")
    }

    @Test func anIPv6UpstreamIsBracketedInCONNECT() async throws {
        let (proxy, port, log) = try await self.startTinyproxy()
        defer { proxy.stop() }
        let server = try await UpstreamServer(.nio, arguments: ["--host", "::1"])
        var config = try LinkHarness.configuration(url: "ws://[::1]:\(server.port)/v6")
        config.proxy.url = ProxyURL(kind: .httpConnect, host: "127.0.0.1", port: port)
        let link = try await LinkHarness(config)
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        #expect(await link.state(.open) != nil, "\(link.events.text)")
        let logged = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(logged.contains("CONNECT [::1]:\(server.port)"), "\(logged)")
    }

    @Test(arguments: ["config", "environment"])
    func connectsThroughAnHTTPConnectProxy(_ source: String) async throws {
        let (proxy, port, log) = try await self.startTinyproxy()
        defer { proxy.stop() }
        let server = try await self.tlsServer()
        var config = try self.config(server)
        var environment: [String: String] = [:]
        if source == "config" {
            config.proxy.url = ProxyURL(kind: .httpConnect, host: "127.0.0.1", port: port)
        } else {
            config.proxy.useEnvironment = true
            environment = ["https_proxy": "http://127.0.0.1:\(port)", "no_proxy": "example.invalid"]
        }
        let link = try await LinkHarness(config, environment: environment)
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        #expect(await link.state(.open) != nil, "\(link.events.text)")
        #expect(try await link.send("via proxy"))
        #expect(await link.events.wait(containing: "message text via proxy") != nil)
        // The proxy really carried it.
        let logged = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(logged.contains("CONNECT localhost:\(server.port)"), "\(logged)")
    }

    @Test(arguments: ["config", "environment"])
    func connectsThroughASOCKS5Proxy(_ source: String) async throws {
        let (proxy, port) = try await startListening("microsocks") { port in
            try ManagedProcess("/usr/bin/microsocks", ["-i", "127.0.0.1", "-p", "\(port)"], name: "microsocks")
        }
        defer { proxy.stop() }
        let server = try await self.tlsServer()
        var config = try self.config(server)
        var environment: [String: String] = [:]
        if source == "config" {
            config.proxy.url = ProxyURL(kind: .socks5, host: "127.0.0.1", port: port)
        } else {
            config.proxy.useEnvironment = true
            environment = ["all_proxy": "socks5://127.0.0.1:\(port)"]
        }
        let link = try await LinkHarness(config, environment: environment)
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        #expect(await link.state(.open) != nil, "\(link.events.text)")
        #expect(try await link.send("via socks"))
        #expect(await link.events.wait(containing: "message text via socks") != nil)
        // The proxy really carried it (microsocks logs each tunnel it opens).
        let logged = await proxy.stderr.wait(timeout: .seconds(5)) { $0.contains("connected to localhost:\(server.port)") }
        #expect(logged != nil, "\(proxy.stderr.text) \(proxy.stdout.text)")
    }

    @Test func noProxyBypassesTheEnvironmentProxy() async throws {
        let server = try await self.tlsServer()
        var config = try self.config(server)
        config.proxy.useEnvironment = true
        // A proxy that does not exist: only no_proxy lets this connect.
        let environment = ["https_proxy": "http://127.0.0.1:1", "no_proxy": "localhost"]
        let link = try await LinkHarness(config, environment: environment)
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        #expect(await link.state(.open) != nil, "\(link.events.text)")
    }
}
