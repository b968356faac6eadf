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
            ("listen = \"0.0.0.0:8765\"", "local.websocket.listen", "must be a loopback address"),
            ("listen = \"192.168.1.5:8765\"", "local.websocket.listen", "a TLS proxy that checks its clients"),
            ("listen = \"8765\"", "local.websocket.listen", "must be \"HOST:PORT\" on loopback"),
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

    @Test func theWebSocketFaceServesEveryProtocol() throws {
        for kind in Configuration.ApplicationProtocol.Kind.allCases {
            let config = try self.load("[upstream]\nprotocol = \"\(kind.rawValue)\"\n[local.websocket]\nlisten = \"127.0.0.1:8765\"\n")
            #expect(config.local.webSocket.isOn && config.applicationProtocol.kind == kind)
        }
    }
}
