import WSBridgeProtocol

/// What an app's own library expects of its server on the WebSocket face (docs/websocket.md),
/// beyond what the protocol layer answers for every app (its handshake, its pings, its calls):
/// the subprotocol it asks for, the path it connects to, what the server says before the app
/// says anything, the server's own pings, and the answers that name the app's own session.
/// Pure: the face's app (`WebSocketApp`) carries it out.
package struct AppProtocolFace: Sendable, Equatable {
    package let kind: Configuration.ApplicationProtocol.Kind
    /// Socket.IO's namespace (`[protocol] namespace`): the one an app may connect.
    let namespace: String

    /// Engine.IO's ping period and the wait for its pong (the Socket.IO server's defaults: a
    /// client library takes them from the open packet).
    package static let engineIOPingInterval: Duration = .seconds(25)
    package static let engineIOPingTimeout: Duration = .seconds(20)

    package init(_ settings: Configuration.ApplicationProtocol) {
        self.kind = settings.kind
        self.namespace = settings.namespace ?? "/"
    }

    /// The subprotocols the face agrees to, the most wanted first.
    package var subprotocols: [String] {
        switch self.kind {
        case .graphqlTransportWS: ["graphql-transport-ws"]
        case .stomp: ["v12.stomp", "v11.stomp", "v10.stomp"]
        default: []
        }
    }

    /// The subprotocol the face answers a request offering `offered` with (RFC 6455 4.2.2: one
    /// of those offered, or none).
    package func subprotocol(offered: [String]) -> String? {
        self.subprotocols.first { offered.contains($0) }
    }

    /// The protocol's messages go to its apps in binary frames (NATS: its client libraries
    /// read no text frame), else in text frames.
    package var binaryFrames: Bool { self.kind == .nats }

    /// Paths the protocol's client libraries connect to, answered besides `local.websocket.paths`.
    package var libraryPaths: [String] { self.kind == .socketio ? ["/socket.io/"] : [] }

    /// Why a request with this query is refused (nil: it is not). Socket.IO: Engine.IO 4 over
    /// the WebSocket transport only (the face has no long-polling).
    package func refusal(query: String) -> String? {
        guard self.kind == .socketio else { return nil }
        let fields = Self.fields(query)
        if let eio = fields["EIO"], eio != "4" {
            return "this face speaks Engine.IO 4 (Socket.IO 3 and later clients), not EIO=\(eio)"
        }
        if let transport = fields["transport"], transport != "websocket" {
            return "this face has the websocket transport only: set transports: [\"websocket\"] in the client, not \(transport)"
        }
        return nil
    }

    /// What the face says first, before the app says anything: Engine.IO's open packet (the
    /// app's own `sid`), NATS's INFO. nil: nothing (the app speaks first).
    package func greeting(sid: String, maxPayload: Int, clientID: Int) -> String? {
        switch self.kind {
        case .socketio:
            let open: JSONValue = [
                "sid": .string(sid), "upgrades": [],
                "pingInterval": .number(JSONNumber(Self.milliseconds(Self.engineIOPingInterval))),
                "pingTimeout": .number(JSONNumber(Self.milliseconds(Self.engineIOPingTimeout))),
                "maxPayload": .number(JSONNumber(maxPayload)),
            ]
            return "0" + open.serialized
        case .nats:
            let info: JSONValue = [
                "server_id": "wsbridged", "server_name": "wsbridged", "version": .string(WSBridgeVersion.current), "proto": 1,
                "headers": true, "max_payload": .number(JSONNumber(maxPayload)), "client_id": .number(JSONNumber(clientID)),
            ]
            return "INFO \(info.serialized)\r\n"
        default:
            return nil
        }
    }

    /// The face's own ping to the app (Engine.IO's: the server pings every pingInterval, the
    /// client answers; a client that hears none for pingInterval + pingTimeout gives up) and
    /// how often; an app whose pong has not come by the next ping (pingInterval, longer than
    /// pingTimeout) is closed. nil: none (the app's library pings, and the protocol layer answers).
    package var ping: (text: String, every: Duration)? {
        self.kind == .socketio ? ("2", Self.engineIOPingInterval) : nil
    }

    /// How the face takes one of an app's messages (`view`, the codec's).
    package enum Handling: Equatable {
        /// Through the protocol layer, as an NDJSON app's `send` goes.
        case layer
        /// Answered here with this text (the app's own session in it).
        case answer(String)
        /// The answer to the face's own ping.
        case pong
        /// Taken, nothing to answer.
        case swallow
    }

    package func handling(of view: JSONValue, sid: String) -> Handling {
        switch self.kind {
        case .socketio:
            switch view["type"]?.stringValue {
            case "pong":
                return .pong
            case "connect":
                // Its own Socket.IO session id, in the namespace the daemon connected.
                let namespace = view["namespace"]?.stringValue ?? "/"
                let prefix = namespace == "/" ? "" : namespace + ","
                guard namespace == self.namespace else {
                    let message: JSONValue = ["message": .string("wsbridged connects namespace \(self.namespace) only ([protocol] namespace)")]
                    return .answer("44\(prefix)\(message.serialized)")
                }
                let data: JSONValue = ["sid": .string(sid + "-io")]
                return .answer("40\(prefix)\(data.serialized)")
            default:
                return .layer
            }
        case .nats:
            // CONNECT is the app's own: +OK only if it asked for verbose answers.
            guard view["op"]?.stringValue == "CONNECT" else { return .layer }
            return view["options"]?["verbose"] == .bool(true) ? .answer("+OK\r\n") : .swallow
        default:
            return .layer
        }
    }

    /// A request's query as its fields (`a=1&b` → a: 1, b: ""; the last of a repeated one).
    package static func fields(_ query: some StringProtocol) -> [Substring: Substring] {
        var fields: [Substring: Substring] = [:]
        for pair in Substring(query).split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            fields[parts[0]] = parts.count > 1 ? parts[1] : ""
        }
        return fields
    }

    private static func milliseconds(_ duration: Duration) -> Int {
        Int(duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000)
    }
}
