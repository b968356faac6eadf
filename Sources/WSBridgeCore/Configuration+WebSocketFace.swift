import TOMLKit

extension Configuration.Local {
    /// `[local.websocket]`: the local WebSocket face (docs/websocket.md), off unless `listen` or
    /// `socket` is set. Apps connect with their own WebSocket library and change only the URL.
    public struct WebSocket: Sendable, Equatable {
        /// A TCP address: loopback (`127.0.0.1:8765`, `[::1]:8765`), or another only with TLS and
        /// a token (`tls_cert_file`, `tls_key_file`, `token_file`); nil: none.
        public var listen: Configuration.HostPort? = nil
        /// The face's certificate chain and key (PEM): `listen` serves wss:// (the Unix socket
        /// stays plain). nil: plain ws://.
        public var tlsCertFile: String? = nil
        public var tlsKeyFile: String? = nil
        /// A Unix socket path for `ws+unix:` clients; nil: none. It takes `local.mode` and
        /// `local.group`, as the NDJSON socket does.
        public var socket: String? = nil
        /// The request paths the face answers (any query string aside); others get 404.
        public var paths: [String] = ["/"]
        /// WebSocket clients connected at once; one more is answered 503.
        public var maxClients = 256
        /// The largest frame a client may send, and the largest message (its frames together).
        public var maxFrameSize = 1 << 20
        public var maxMessageSize = 4 << 20
        /// How long a connection may take to send its upgrade request.
        public var handshakeTimeout: Duration = .seconds(10)
        /// How long a close frame may wait to be written (behind what an app that stopped reading
        /// did not take yet) before the connection ends without it.
        public var closeTimeout: Duration = .seconds(10)
        /// The `Origin`s a browser's page may connect from (`http://localhost:3000`); a request
        /// with an Origin not listed is refused (403). A request without one (not a browser) is
        /// not checked. `["*"]`: any origin.
        public var allowedOrigins: [String] = []
        /// A file holding a bearer token: a client must send it (`Authorization: Bearer TOKEN`,
        /// or `?access_token=TOKEN` for a browser, which cannot set headers). nil: none needed.
        public var tokenFile: String? = nil

        /// The most fragments a message may come in: one per 64 bytes of `maxMessageSize` (at
        /// least 1024). Smaller fragments are a flood, not a message: each costs its frame's
        /// bookkeeping until the last one comes.
        public var maxFragments: Int { max(1024, self.maxMessageSize / 64 + 2) }

        /// The face listens somewhere.
        public var isOn: Bool { self.listen != nil || self.socket != nil }

        public init() {}

        /// `listen` serves wss://.
        public var isTLS: Bool { self.tlsCertFile != nil }

        /// Whether `host` is a loopback address (any other needs TLS and a token).
        public static func isLoopback(_ host: String) -> Bool {
            if host == "localhost" || host == "::1" { return true }
            let parts = host.split(separator: ".", omittingEmptySubsequences: false)
            return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
        }
    }
}

extension ConfigurationReader {
    /// [local.websocket]: the local WebSocket face. Every key takes a restart.
    func webSocketFace(_ s: inout Section, _ config: inout Configuration) {
        s.read("listen", reload: .restart) { v in
            let text = try self.string(v, "local.websocket.listen")
            guard !text.isEmpty else { return }
            guard let address = Configuration.HostPort(parsing: text) else {
                throw self.error("local.websocket.listen", v, "must be \"HOST:PORT\", such as \"127.0.0.1:8765\" or \"[::1]:8765\" (empty: none)")
            }
            config.local.webSocket.listen = address
        }
        s.read("socket", reload: .restart) { v in
            config.local.webSocket.socket = try self.path(v, "local.websocket.socket")
        }
        s.read("paths", reload: .restart) { v in
            let accepted = "must be a list of request paths, each starting with \"/\", e.g. [\"/\", \"/graphql\"]"
            guard let array = v.array, !array.isEmpty else { throw self.error("local.websocket.paths", v, accepted) }
            config.local.webSocket.paths = try array.map { (item: any TOMLValueConvertible) throws(ConfigurationError) -> String in
                let path = try self.string(item, "local.websocket.paths")
                guard path.hasPrefix("/"), !path.contains("?"), !path.contains(" ") else { throw self.error("local.websocket.paths", item, accepted) }
                return path
            }
        }
        s.read("max_clients", reload: .restart) { v in
            config.local.webSocket.maxClients = try self.int(v, "local.websocket.max_clients", in: 1...100_000, "a client count from 1 to 100000")
        }
        s.read("max_frame_size", reload: .restart) { v in
            config.local.webSocket.maxFrameSize = try self.int(
                v, "local.websocket.max_frame_size", in: 125...(1 << 30), "a byte count from 125 to 1073741824")
        }
        s.read("max_message_size", reload: .restart) { v in
            config.local.webSocket.maxMessageSize = try self.int(
                v, "local.websocket.max_message_size", in: 125...(1 << 30), "a byte count from 125 to 1073741824")
        }
        s.read("handshake_timeout", reload: .restart) { v in
            config.local.webSocket.handshakeTimeout = try self.duration(v, "local.websocket.handshake_timeout")
        }
        s.read("close_timeout", reload: .restart) { v in
            config.local.webSocket.closeTimeout = try self.duration(v, "local.websocket.close_timeout")
        }
        s.read("allowed_origins", reload: .restart) { v in
            let accepted = "must be a list of origins as browsers send them, e.g. [\"http://localhost:3000\"] ([\"*\"]: any)"
            guard let array = v.array else { throw self.error("local.websocket.allowed_origins", v, accepted) }
            config.local.webSocket.allowedOrigins = try array.map { (item: any TOMLValueConvertible) throws(ConfigurationError) -> String in
                let origin = try self.string(item, "local.websocket.allowed_origins")
                guard origin == "*" || origin.hasPrefix("http://") || origin.hasPrefix("https://"), !origin.hasSuffix("/") else {
                    throw self.error("local.websocket.allowed_origins", item, accepted + ", with no path or trailing slash")
                }
                return origin
            }
        }
        s.read("token_file", reload: .restart) { v in
            config.local.webSocket.tokenFile = try self.path(v, "local.websocket.token_file")
        }
        s.read("tls_cert_file", reload: .restart) { v in config.local.webSocket.tlsCertFile = try self.path(v, "local.websocket.tls_cert_file") }
        s.read("tls_key_file", reload: .restart) { v in config.local.webSocket.tlsKeyFile = try self.path(v, "local.websocket.tls_key_file") }
        let face = config.local.webSocket
        if (face.tlsCertFile == nil) != (face.tlsKeyFile == nil) {
            let key = face.tlsCertFile == nil ? "local.websocket.tls_cert_file" : "local.websocket.tls_key_file"
            s.problem(self.error(key, nil, "local.websocket.tls_cert_file and tls_key_file go together: set both for wss://, or neither"))
        }
        if let address = face.listen, !Configuration.Local.WebSocket.isLoopback(address.host), !face.isTLS || face.tokenFile == nil {
            s.problem(
                self.error(
                    "local.websocket.listen", nil,
                    "\(address) is not a loopback address: another host's apps need tls_cert_file, tls_key_file and token_file in [local.websocket] (the face knows no user of another host, so the token is the only key, and TLS keeps it secret on the network); or listen on 127.0.0.1"
                ))
        }
    }
}
