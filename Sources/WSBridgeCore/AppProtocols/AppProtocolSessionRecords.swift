import WSBridgeProtocol

/// The session's records, types of their own (not nested in the session) so that their
/// metadata is known at compile time.
struct AppProtocolSessionHolder: Equatable {
    var app: AppID
    var appID: WireID
    /// Whether it has had the subscribe's answer (protocols whose subscribe is answered).
    var answered: Bool
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
    /// to each holder (the first answer, kept for later holders), and ends nothing; the answers
    /// to its sends on later opens go to no app.
    var stickyCall: StickyCall? = nil

    struct StickyCall {
        var answer: JSONValue?
    }
}

extension AppProtocolSessionSubscription {
    /// A sticky call's answer: the holders it is due to (those not yet acknowledged), now
    /// acknowledged; the first answer is kept for later holders. On a later open: none.
    mutating func answerStickyCall(with answer: JSONValue) -> [AppProtocolSessionHolder] {
        if self.stickyCall?.answer == nil { self.stickyCall?.answer = answer }
        var due: [AppProtocolSessionHolder] = []
        for i in self.holders.indices where !self.holders[i].answered {
            self.holders[i].answered = true
            due.append(self.holders[i])
        }
        return due
    }

    /// One more holder of a sticky call: the answer it is due now, if the call had one.
    mutating func holdStickyCall(_ holder: AppProtocolSessionHolder) -> JSONValue? {
        var holder = holder
        holder.answered = self.stickyCall?.answer != nil
        self.holders.append(holder)
        return self.stickyCall?.answer
    }
}

struct AppProtocolSessionCall {
    var app: AppID
    var appID: WireID
}

/// What an app's own id stands for: a call (by its upstream id) or a subscription (by its
/// key, which outlives the upstream ids of reconnects).
enum AppProtocolSessionHeld: Equatable {
    case call(WireID)
    case subscription(String)
}
