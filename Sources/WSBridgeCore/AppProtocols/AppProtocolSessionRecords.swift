import WSBridgeProtocol

/// The session's records, types of their own (not nested in the session) so that their
/// metadata is known at compile time.
package struct AppProtocolSessionHolder: Equatable, Sendable {
    package var app: AppID
    package var appID: WireID
    /// Whether it has had the subscribe's answer (protocols whose subscribe is answered).
    var answered: Bool

    package init(app: AppID, appID: WireID, answered: Bool = false) {
        self.app = app
        self.appID = appID
        self.answered = answered
    }
}

struct AppProtocolSessionSubscription {
    var key: String
    /// The subscribe as the first app sent it (its id is replaced on every send).
    var message: JSONValue
    var upstreamID: WireID
    var holders: [AppProtocolSessionHolder]
    /// Server-assigned id on this connection, and the one apps were given first.
    var serverID: WireID?
    var visibleID: WireID?
    /// When the first holder subscribed (milliseconds since the epoch).
    var since: Int64
    /// Why it is not sent again (the server closed the link after it on several opens).
    var setAside: String? = nil
    /// The server answered it or sent its events, on this connection or an earlier one: a close
    /// right after an open is never laid at it, and it goes first on the next open.
    var worked = false
    /// A sticky call (a Socket.IO emit with an ack id): the server's answer acknowledges it, once
    /// to each holder (the first answer, kept by the table for later holders), and ends nothing;
    /// the answers to its sends on later opens go to no app. (A flag: the record is copied for
    /// every routed message, and the answer is read only on a sticky call's own paths.)
    var stickyCall = false
    /// A queue group (NATS `SUB subject queue sid`): its holders share its messages, each to the
    /// next holder in turn (this one's index), as the server shares them among the group's
    /// members. nil: every holder gets every message.
    var turn: Int? = nil
}

struct AppProtocolSessionCall {
    var app: AppID
    var appID: WireID
    /// The id it went upstream as.
    var upstream: WireID
    /// Whether that id is a string (`"12"`), not a number (`12`).
    var quoted: Bool

    init(app: AppID, appID: WireID, upstream: WireID) {
        self.app = app
        self.appID = appID
        self.upstream = upstream
        self.quoted = upstream.key.utf8.first == UInt8(ascii: "\"")
    }
}

/// What an app's own id stands for: a call (by its upstream id) or a subscription (by its
/// key, which outlives the upstream ids of reconnects).
enum AppProtocolSessionHeld: Equatable {
    case call(WireID)
    case subscription(String)
}
