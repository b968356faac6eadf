import Testing

@testable import WSBridgeCore

extension ConfigurationLoaderTests {
    @Test func theWebSocketFaceIsOffUntilItListensAndTakesItsDefaults() throws {
        #expect(try !self.load("").local.webSocket.isOn)
        let config = try self.load("[local.websocket]\nlisten = \"127.0.0.1:8765\"\nsocket = \"/run/wsbridged/ws.sock\"\n")
        let face = config.local.webSocket
        #expect(face.isOn && face.listen == Configuration.HostPort(host: "127.0.0.1", port: 8765) && face.socket == "/run/wsbridged/ws.sock")
        #expect(face.paths == ["/"] && face.maxClients == 256 && face.maxFrameSize == 1 << 20 && face.maxMessageSize == 4 << 20)
        #expect(face.allowedOrigins.isEmpty && face.tokenFile == nil && face.handshakeTimeout == .seconds(10))
        // A 4 MiB message may come in 64-byte fragments, not smaller.
        #expect(face.maxFragments == (4 << 20) / 64 + 2)
        #expect(config.fileKeys["local.websocket.listen"]?.reload == .restart)
        let v6 = try self.load("[local.websocket]\nlisten = \"[::1]:8765\"\npaths = [\"/\", \"/graphql\"]\nallowed_origins = [\"http://localhost:3000\"]\n")
        #expect(v6.local.webSocket.listen?.host == "::1" && v6.local.webSocket.paths == ["/", "/graphql"])
    }

    @Test func theWebSocketFacesMistakesSayWhatToWrite() {
        let cases: [(String, String, String)] = [
            ("listen = \"0.0.0.0:8765\"", "local.websocket.listen", "is not a loopback address"),
            ("listen = \"192.168.1.5:8765\"", "local.websocket.listen", "is not a loopback address"),
            ("listen = \"8765\"", "local.websocket.listen", "must be \"HOST:PORT\""),
            ("paths = [\"graphql\"]", "local.websocket.paths", "each starting with \"/\""),
            ("paths = []", "local.websocket.paths", "must be a list of request paths"),
            ("allowed_origins = [\"localhost:3000\"]", "local.websocket.allowed_origins", "as browsers send them"),
            ("allowed_origins = [\"http://localhost:3000/\"]", "local.websocket.allowed_origins", "no path or trailing slash"),
            ("max_frame_size = 10", "local.websocket.max_frame_size", "from 125"),
            ("max_clients = 0", "local.websocket.max_clients", "from 1 to 100000"),
            ("listn = \"127.0.0.1:1\"", "local.websocket.listn", "did you mean"),
        ]
        for (text, key, says) in cases {
            let error = self.failure("[local.websocket]\n" + text + "\n")
            #expect(error?.key == key && error?.description.contains(says) == true, "\(text): \(String(describing: error))")
        }
    }

    /// Another host's apps only over TLS and with a token: the face knows no user of theirs.
    @Test func aNonLoopbackAddressNeedsTLSAndAToken() throws {
        let bare = self.failure("[local.websocket]\nlisten = \"0.0.0.0:8765\"\n")
        #expect(
            bare?.key == "local.websocket.listen" && bare?.description.contains("need tls_cert_file, tls_key_file and token_file") == true,
            "\(String(describing: bare))")
        let noToken = self.failure("[local.websocket]\nlisten = \"0.0.0.0:8765\"\ntls_cert_file = \"/etc/c.pem\"\ntls_key_file = \"/etc/k.pem\"\n")
        #expect(noToken?.key == "local.websocket.listen", "\(String(describing: noToken))")
        let half = self.failure("[local.websocket]\nlisten = \"127.0.0.1:8765\"\ntls_cert_file = \"/etc/c.pem\"\n")
        #expect(half?.key == "local.websocket.tls_key_file" && half?.description.contains("go together") == true, "\(String(describing: half))")
        let face = try self.load(
            "[local.websocket]\nlisten = \"0.0.0.0:8765\"\ntls_cert_file = \"/etc/c.pem\"\ntls_key_file = \"/etc/k.pem\"\ntoken_file = \"/etc/t\"\n"
        ).local.webSocket
        #expect(face.isTLS && face.listen?.host == "0.0.0.0" && face.tokenFile == "/etc/t")
    }

    @Test func theWebSocketFaceServesEveryProtocol() throws {
        for kind in Configuration.ApplicationProtocol.Kind.allCases {
            let config = try self.load("[upstream]\nprotocol = \"\(kind.rawValue)\"\n[local.websocket]\nlisten = \"127.0.0.1:8765\"\n")
            #expect(config.local.webSocket.isOn && config.applicationProtocol.kind == kind)
        }
    }
}
