import WSBridgeProtocol

/// A local app, as the daemon numbers its connections.
package typealias AppID = Int

/// What a message from an app is, to the protocol.
package enum AppOp: Equatable, Sendable {
    /// The app's own handshake (its client library's habit): answered locally, never forwarded.
    case handshake
    /// The app's keepalive: answered locally.
    case ping
    /// A connection-level message the daemon owns (the app's pong): dropped.
    case swallow
    /// Expects answers carrying `id` (a JSON-RPC call, a graphql query or mutation).
    case call(id: WireID)
    /// Opens a subscription; two with the same `key` are one upstream.
    case subscribe(id: WireID, key: String)
    /// Ends the app's subscription `target` (graphql: the operation id; JSON-RPC: the
    /// subscription id the app was given). `id`: the message's own id, when it expects an answer.
    case unsubscribe(id: WireID?, target: WireID)
    /// Anything else: forwarded as it is.
    case other
    /// Not a message of this protocol: refused with this reason.
    case invalid(String)

    /// Answered or taken here, nothing sent upstream: what an app that may not send may still do.
    package var isAnsweredHere: Bool {
        switch self {
        case .handshake, .ping, .swallow: true
        default: false
        }
    }
}

/// What a message from the upstream is, to the protocol.
package enum UpstreamOp: Equatable, Sendable {
    /// The handshake is acknowledged: the connection is ready.
    case ack
    /// The server's keepalive: the daemon answers it.
    case ping
    /// Connection-level, for no app (a pong).
    case swallow
    /// Belongs to the call or subscription with this (upstream) id; `final`: it ends it.
    case answer(id: WireID, final: Bool)
    /// An event of the subscription the server calls `subscription` (a server-assigned id).
    case event(subscription: WireID)
    /// For every subscriber, as today.
    case broadcast
    /// Connection-level, for no app, and it sets the keepalive's timing (Engine.IO's open packet).
    case open
    /// The server reports an error (STOMP `ERROR`, NATS `-ERR`, Socket.IO `44`): for every
    /// subscriber, in the log and status; `fatal`: the connection is over, the link reconnects.
    case error(String, fatal: Bool)
    /// The server refused the subscription with routing key `key` (it never started; a NATS
    /// permissions violation): an error as `error`, and the subscription is set aside.
    case refused(key: String, String)
}

/// What the protocol layer asks the daemon to do.
package enum AppProtocolEffect: Equatable, Sendable {
    /// Send upstream.
    case upstream(JSONValue)
    /// Deliver to one app.
    case app(AppID, JSONValue)
    /// For every subscriber, as the upstream sent it.
    case broadcast
    /// Refuse the app's message with this reason (nothing was sent).
    case refuse(String)
    /// The handshake was acknowledged: the link is ready.
    case ready
    /// The connection's keepalive as the server set it (replaces any earlier one).
    case timing(AppProtocolTiming)
    /// The server reported an error (in the log and status); `fatal`: the link reconnects.
    case serverError(String, fatal: Bool)
}

/// The protocol's keepalive on one connection: what the daemon sends and how long the server may
/// stay silent (milliseconds; nil: nothing of that).
package struct AppProtocolTiming: Equatable, Sendable {
    /// Send `text` upstream this often (STOMP's heart-beat).
    package var sendEvery: Int64?
    package var text: String
    /// The link is dead when nothing arrives from the server for this long.
    package var deadline: Int64?

    package init(sendEvery: Int64? = nil, text: String = "", deadline: Int64? = nil) {
        self.sendEvery = sendEvery
        self.text = text
        self.deadline = deadline
    }
}

/// One message of a text protocol: its wire text and its JSON view.
package struct AppProtocolMessage: Equatable, Sendable {
    package var text: String
    package var view: JSONValue

    package init(text: String, view: JSONValue) {
        self.text = text
        self.view = view
    }
}

/// Bounds of the protocol layer's tables (`[protocol]` max_per_app, max_total).
package struct AppProtocolLimits: Sendable, Equatable {
    /// Calls and subscriptions one app may have open.
    package var perApp: Int
    /// ... and all apps together.
    package var total: Int

    /// A subscription after which the server closed the link right after open (before
    /// `backoff.stable_after`, as the link's state machine judges) on this many opens in a row
    /// is set aside (0: never).
    package var setAsideAfter: Int

    /// Bytes of subscription messages remembered (to send again on every open), all together.
    package var subscriptionBytes: Int

    /// Bytes of a text protocol's message cut across WebSocket messages, kept until its end
    /// comes (upstream.max_message_size).
    package var messageBytes: Int

    package init(
        perApp: Int = 1000, total: Int = 10000, setAsideAfter: Int = 3, subscriptionBytes: Int = 16 << 20,
        messageBytes: Int = 16 << 20
    ) {
        self.messageBytes = messageBytes
        self.perApp = perApp
        self.total = total
        self.subscriptionBytes = subscriptionBytes
        self.setAsideAfter = setAsideAfter
    }
}

/// A live subscription, for status.
package struct AppProtocolSubscriptionInfo: Equatable, Sendable {
    package var key: String
    package var upstreamID: String
    package var holders: [(app: AppID, id: String)]
    /// Milliseconds since the epoch the first holder subscribed.
    package var since: Int64 = 0
    /// Why it is set aside (not sent again until an operator clears it), if it is.
    package var setAside: String? = nil

    package static func == (a: Self, b: Self) -> Bool {
        a.key == b.key && a.upstreamID == b.upstreamID && a.setAside == b.setAside && a.holders.elementsEqual(b.holders) { $0.app == $1.app && $0.id == $1.id }
    }
}

extension AppID {
    /// The holder of daemon-scope sticky subscriptions: what belongs to it goes to everyone.
    package static let everyone: AppID = 0
}

/// One application protocol: how to read and rewrite its messages. A small value type, pure;
/// the tables and the routing are `AppProtocolSession`'s.
package protocol AppProtocolCodec: Sendable {
    /// The codec `[protocol]` configures.
    init(settings: Configuration.ApplicationProtocol)
    /// What the link does for this protocol on every open, from `[protocol]`: its handshake as
    /// the first opening message, the ready gate, the subprotocol, the keepalive text.
    static func connection(_ settings: Configuration.ApplicationProtocol) -> AppProtocolConnection
    /// `upstream.protocol`'s name for it.
    var name: String { get }
    /// The id the daemon puts on the wire for its `n`th call or subscription.
    func wireID(_ n: UInt64) -> WireID
    func classify(fromApp message: JSONValue) -> AppOp
    func classify(fromUpstream message: JSONValue) -> UpstreamOp
    /// `message` with its id replaced.
    func replacingID(in message: JSONValue, with id: WireID) -> JSONValue
    /// The local answer to an app's handshake (`acknowledgement`: what the server answered
    /// the daemon's own, when it said more than its type).
    func handshakeAnswer(acknowledgement: JSONValue?) -> JSONValue
    /// The answer to a keepalive `ping` (the server's or an app's); nil: none.
    func pong(to ping: JSONValue) -> JSONValue?
    /// What ends subscription `upstreamID` upstream when its last holder leaves (`serverID`: the
    /// server-assigned id, for protocols that have one). nil: nothing to send.
    func endMessage(upstreamID: WireID, serverID: WireID?, callID: WireID) -> JSONValue?
    /// The subscription id the server assigned, in its answer to a subscribe (nil: none, or an
    /// error answer).
    func serverSubscriptionID(in answer: JSONValue) -> WireID?
    /// `message` (an event or a subscribe's answer) with the subscription id the app knows.
    func replacingSubscriptionID(in message: JSONValue, with id: WireID) -> JSONValue
    /// The local answer to an app's subscribe with `id` to a subscription another app holds and
    /// the server answered with `subscription` (nil: the protocol answers subscribes with nothing).
    func subscribeAnswer(id: WireID, subscription: WireID) -> JSONValue?
    /// The local answer to an app's unsubscribe with `id` while others still hold the
    /// subscription (nil: the protocol answers nothing).
    func unsubscribeAnswer(id: WireID) -> JSONValue?
    /// What an app waiting for `id` is told when the link drops before the answer came.
    func linkLostAnswer(id: WireID, reason: String) -> JSONValue
    /// Whether an answer that is `final` ends a subscription (graphql's `complete`); `json`'s
    /// subscriptions end only when their holders leave.
    var answersEndSubscriptions: Bool { get }
    /// An app may send several calls as one message (JSON-RPC 2.0's batch: an array), answered
    /// together as one (`AppProtocolBatches`).
    var takesBatches: Bool { get }
    /// Whether an upstream message whose id nobody holds goes to everyone (`json`, where an id
    /// may be data) or nowhere (an answer to an id of an earlier connection).
    var unknownAnswersBroadcast: Bool { get }
    /// The id of an app's sticky send that makes it a subscription (nil: it is not one).
    func subscriptionID(inSticky message: JSONValue) -> WireID?
    /// Object keys without which an upstream message is a broadcast (nil: every message must be
    /// read): a message whose text has none of them goes to everyone unparsed.
    var routingKeys: [String]? { get }
    /// Whether `scan(upstream:)` can tell anything (false: every message is parsed).
    var scansUpstream: Bool { get }
    /// Whether `scan(upstream:)` tells a broadcast for what is not the protocol's, in no more
    /// than a look for the routing keys takes: then the scan comes first, and the routing keys
    /// are looked for only when it cannot tell (JSON-RPC's events carry `subscription` deep in
    /// the text, past which the keys' look reads for every event).
    var scanTellsBroadcasts: Bool { get }
    /// The protocol message at the start of `bytes`, told from a scan of its bytes where it is a
    /// call's answer or a subscription's event (issue 46: routed without a parse,
    /// `AppProtocolSession.route(scanned:in:)`); `unsure` for anything else.
    func scan(upstream bytes: UnsafeRawBufferPointer) -> AppProtocolScan
    /// `id` as the wire carries it where `scan` found an id (a JSON value's text, a STOMP header
    /// value escaped, a NATS sid).
    func scannedIDText(_ id: WireID) -> String
    /// Whether the server names subscriptions (JSON-RPC: an answer to a subscribe's id carries
    /// the server's id, which only a parse reads).
    var namesSubscriptions: Bool { get }

    // Text protocols (Socket.IO, STOMP, NATS): messages that are not JSON, several to a WebSocket
    // message or one across several; the protocol layer works on their JSON views.

    /// Whether the protocol's messages are text with a JSON view (false: JSON, the view is the message).
    var isText: Bool { get }
    /// The whole messages at the start of `bytes` and the bytes they took (what is left is a
    /// message cut across WebSocket messages), or why the bytes are not this protocol.
    func split(_ bytes: ArraySlice<UInt8>) -> Result<(messages: [AppProtocolMessage], consumed: Int), AppProtocolSyntaxError>
    /// A view as the wire carries it.
    func wireText(_ view: JSONValue) -> String
    /// The ids of requests an upstream message (its ids restored for an app) may answer.
    func answerIDs(in message: JSONValue) -> [(id: WireID, final: Bool)]
    /// What the daemon answers at once to an app's subscribe or unsubscribe that asks for a
    /// receipt (STOMP's `receipt` header); nil: none asked.
    func receipt(for message: JSONValue) -> JSONValue?
    /// Whether an app's subscription `key` takes the messages an app's call with `id` is answered
    /// with (NATS: its inbox subscription covers the reply subject): then the call goes as it is.
    func subscription(_ key: String, covers id: WireID) -> Bool
    /// Whether subscription `key` is a queue group whose holders share its messages in turn
    /// (NATS: a SUB with a queue group), rather than each getting every one.
    func sharesInTurn(key: String) -> Bool
    /// Whether `subscription(_:covers:)` can ever be true (else a call never looks at the app's
    /// subscriptions).
    var callsMayBeCovered: Bool { get }
    /// The keepalive an acknowledgement or an open message sets (nil: none).
    func timing(in message: JSONValue) -> AppProtocolTiming?
    /// Text protocols: how a WebSocket message that is one broadcast message begins (Socket.IO's
    /// `42[`: an event without an ack id), told without reading the rest.
    var broadcastPrefixes: [[UInt8]] { get }
}

extension AppProtocolCodec {
    /// A protocol without a handshake: the link opens as for `raw`.
    package static func connection(_ settings: Configuration.ApplicationProtocol) -> AppProtocolConnection { AppProtocolConnection() }

    /// The protocol layer for this codec, as `[protocol]` configures it.
    static func session(_ settings: Configuration.ApplicationProtocol, limits: AppProtocolLimits) -> AppProtocolSession {
        AppProtocolSession(codec: Self(settings: settings), limits: limits)
    }
}

/// What the link does for a protocol on every open (`Configuration`'s loader applies it): the
/// link, not the protocol layer, sends the handshake, so that `${token}` is filled in at each
/// connect and the ready gate holds sends until the server answered it.
package struct AppProtocolConnection: Sendable, Equatable {
    /// The first opening message (`upstream.on_open`'s syntax, placeholders allowed).
    package var opening: String?
    /// The ready gate, unless `upstream.ready_when` sets one.
    package var readyWhen: Filter?
    /// The WebSocket subprotocol to offer.
    package var subprotocol: String?
    /// The daemon's own keepalive text with every WebSocket ping, unless `heartbeat.text` sets one.
    package var heartbeatText: String?

    package init(opening: String? = nil, readyWhen: Filter? = nil, subprotocol: String? = nil, heartbeatText: String? = nil) {
        self.opening = opening
        self.readyWhen = readyWhen
        self.subprotocol = subprotocol
        self.heartbeatText = heartbeatText
    }
}

/// Bytes that are not a message of the protocol.
package struct AppProtocolSyntaxError: Error, Equatable, Sendable, CustomStringConvertible {
    package var description: String
    package init(_ description: String) { self.description = description }
}

/// What a protocol without server-assigned subscription ids or local answers to subscribe and
/// unsubscribe (all but JSON-RPC), and without a handshake of the session's own, needs not write.
extension AppProtocolCodec {
    package func serverSubscriptionID(in answer: JSONValue) -> WireID? { nil }
    package func replacingSubscriptionID(in message: JSONValue, with id: WireID) -> JSONValue { message }
    package func subscribeAnswer(id: WireID, subscription: WireID) -> JSONValue? { nil }
    package func unsubscribeAnswer(id: WireID) -> JSONValue? { nil }
}

extension AppProtocolCodec {
    package var answersEndSubscriptions: Bool { true }
    package var takesBatches: Bool { false }
    package var unknownAnswersBroadcast: Bool { false }
    package var routingKeys: [String]? { nil }
    package var scansUpstream: Bool { false }
    package var scanTellsBroadcasts: Bool { false }
    package func scan(upstream bytes: UnsafeRawBufferPointer) -> AppProtocolScan { .unsure }
    package func scannedIDText(_ id: WireID) -> String { id.json.serialized }
    package var namesSubscriptions: Bool { false }
    package var isText: Bool { false }
    package func split(_ bytes: ArraySlice<UInt8>) -> Result<(messages: [AppProtocolMessage], consumed: Int), AppProtocolSyntaxError> {
        do {
            let view = try JSONValue.parse(bytes)
            return .success(([AppProtocolMessage(text: String(decoding: bytes, as: UTF8.self), view: view)], bytes.count))
        } catch {
            return .failure(AppProtocolSyntaxError("not JSON: \(error)"))
        }
    }
    package func wireText(_ view: JSONValue) -> String { view.serialized }
    package func answerIDs(in message: JSONValue) -> [(id: WireID, final: Bool)] {
        guard case .answer(let id, let final) = self.classify(fromUpstream: message) else { return [] }
        return [(id, final)]
    }
    package func receipt(for message: JSONValue) -> JSONValue? { nil }
    package func subscription(_ key: String, covers id: WireID) -> Bool { false }
    package func sharesInTurn(key: String) -> Bool { false }
    package var callsMayBeCovered: Bool { false }
    package func timing(in message: JSONValue) -> AppProtocolTiming? { nil }
    package var broadcastPrefixes: [[UInt8]] { [] }
    package func subscriptionID(inSticky message: JSONValue) -> WireID? {
        switch self.classify(fromApp: message) {
        case .call(let id), .subscribe(let id, _): id
        default: nil
        }
    }
}

extension JSONValue {
    /// This object with `key` set to `value` (added at the end when missing).
    package func setting(_ key: String, to value: JSONValue) -> JSONValue {
        guard case .object(var members) = self else { return self }
        if let i = members.lastIndex(where: { $0.0 == key }) {
            members[i].1 = value
        } else {
            members.append((key, value))
        }
        return .object(members)
    }
}

/// The protocol layer for `upstream.protocol` (nil for `raw`). The link sends graphql's
/// handshake itself (an opening message and the ready gate: Configuration's `applyProtocol`).
package func makeAppProtocolSession(
    _ settings: Configuration.ApplicationProtocol, maxMessageSize: Int = 16 << 20
) -> AppProtocolSession? {
    let limits = AppProtocolLimits(
        perApp: settings.maxPerApp, total: settings.maxTotal, setAsideAfter: settings.setAsideAfter,
        subscriptionBytes: settings.maxSubscriptionBytes, messageBytes: maxMessageSize)
    return settings.kind.codec?.session(settings, limits: limits)
}
