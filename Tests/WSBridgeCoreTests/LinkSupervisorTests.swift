import Testing
import WSBridgeProtocol

@testable import WSBridgeCore

/// The link's machine as a whole (`LinkSupervisor`), time and randomness injected: the rules
/// between the connection's machine, the failover and the renewal.
@Suite struct LinkSupervisorTests {
    let urls = try! ["ws://primary/", "ws://fallback/"].map { try UpstreamURL(parsing: $0) }

    func supervisor() -> LinkSupervisor {
        let settings = LinkStateMachine.Settings(
            backoff: BackoffPolicy(base: .seconds(1), cap: .seconds(8), stableAfter: .seconds(30)),
            heartbeat: .init(interval: .seconds(10), deadline: .seconds(5)))
        return LinkSupervisor(link: LinkStateMachine(settings: settings, now: t(0), generator: MaxGenerator()))
    }

    /// Open at t(1), on the URL the attempt took.
    func open(_ s: inout LinkSupervisor) throws {
        _ = s.attemptURL(in: self.urls)
        _ = try s.connection { try $0.connectRequested(now: t(0)) }
        _ = try s.connection { try $0.upgraded(readyGate: false, now: t(1)) }
        #expect(s.link.phase == .open)
    }

    /// A renewal started at t(2) and restored.
    func renewing(_ s: inout LinkSupervisor) {
        let ask = s.askRenewal(why: "lifetime")
        let started = s.startRenewal(why: "lifetime", now: t(2))
        #expect(ask == .mayStart && started)
        s.renewalReady(sent: ["k"])
        #expect(s.renewal.successorReady)
    }

    @Test func aFailedAttemptRetriesWithTheBackoffOnTheNextURL() throws {
        var s = self.supervisor()
        let first = s.attemptURL(in: self.urls)
        #expect(first == self.urls[0])
        _ = try s.connection { try $0.connectRequested(now: t(0)) }
        let (action, next) = try s.connectFailed(.error("refused"), urls: self.urls, now: t(0.5))
        // The backoff's delay (full jitter: the generator takes its top, 2 s for a first failure).
        #expect(action == .scheduleRetry(after: .seconds(2), attempt: 2))
        let second = s.attemptURL(in: self.urls)
        #expect(next == self.urls[1] && second == self.urls[1])
        #expect(s.link.phase == .backingOff)
    }

    @Test func aRenewalStartsOnlyOnAnOpenLinkThatIsNotStopping() throws {
        var s = self.supervisor()
        let closedAsk = s.askRenewal(why: "lifetime")
        let closedStart = s.startRenewal(why: "lifetime", now: t(0))
        #expect(closedAsk == .ignored && !closedStart)
        try self.open(&s)
        _ = s.connection { $0.shutdown(now: t(2)) }
        let stoppingAsk = s.askRenewal(why: "lifetime")
        let stoppingStart = s.startRenewal(why: "lifetime", now: t(2))
        #expect(stoppingAsk == .ignored && !stoppingStart)
        #expect(s.renewal.phase == .idle)
    }

    @Test func aTakeoverKeepsTheLinkOpenOnTheNewConnectionAndThePlannedReturnToThePrimary() throws {
        var s = self.supervisor()
        _ = s.attemptURL(in: self.urls)
        _ = try s.connection { try $0.connectRequested(now: t(0)) }
        _ = try s.connectFailed(.error("refused"), urls: self.urls, now: t(0.5))
        let fallback = s.attemptURL(in: self.urls)
        #expect(fallback == self.urls[1])
        _ = try s.connection { try $0.retryTimerFired(now: t(1.5)) }
        _ = try s.connection { try $0.upgraded(readyGate: false, now: t(2)) }
        // Open on the fallback: back to the primary 60 s after it opened.
        let back = s.failback(after: .seconds(60), now: t(2))
        let opened = s.takeTransition()
        #expect(back == t(62) && opened?.to == .open)
        let ask = s.askRenewal(why: "lifetime")
        let started = s.startRenewal(why: "lifetime", now: t(10))
        #expect(ask == .mayStart && started)
        // Not before the new connection is restored.
        let early = s.renewalTookOver(now: t(11), wallMillis: 0)
        #expect(early == nil)
        s.renewalReady(sent: [])
        let took = s.renewalTookOver(now: t(12), wallMillis: 0)
        #expect(took == .seconds(2))
        // Still open, not a reconnect; its time open and its heartbeat count from the takeover.
        #expect(s.link.phase == .open && s.link.openSince == t(12) && s.link.reconnects == 0)
        let transition = s.takeTransition()
        let heartbeat = s.heartbeat(now: t(12))
        #expect(transition == nil && heartbeat == .wait(until: t(22)))
        // The new connection goes back when the old one would have.
        let planned = s.failback(after: .seconds(60), now: t(12), planned: true)
        #expect(planned == t(62))
        #expect(s.renewal.count == 1)
    }

    @Test func aLinkThatIsNoLongerOpenTakesItsRenewalWithIt() throws {
        // Lost, closed by the operator, stopping: each ends the renewal under way.
        let ends: [(String, (inout LinkStateMachine) throws -> LinkStateMachine.Action)] = [
            ("lost", { try $0.disconnected(.serverClosed(code: 1006, reason: ""), now: t(3)) }),
            ("closed", { $0.userClose(now: t(3)) }),
            ("stopping", { $0.shutdown(now: t(3)) }),
            ("no network", { $0.networkChanged(available: false, now: t(3)) }),
        ]
        for (name, end) in ends {
            var s = self.supervisor()
            try self.open(&s)
            self.renewing(&s)
            let before = s.takeRenewalAbandoned()
            _ = try s.connection(end)
            let abandoned = s.takeRenewalAbandoned()
            let again = s.takeRenewalAbandoned()
            #expect(!before && abandoned && !again, "\(name): told once")
            #expect(s.renewal.phase == .idle, "\(name)")
            // Its connection may not take over a link that is not open.
            s.renewalReady(sent: [])
            let took = s.renewalTookOver(now: t(4), wallMillis: 0)
            #expect(took == nil, "\(name)")
        }
    }

    @Test func anInputThatKeepsTheLinkOpenKeepsItsRenewal() throws {
        var s = self.supervisor()
        try self.open(&s)
        self.renewing(&s)
        // The server's close frame on the current connection: the link is still open until TCP
        // ends (the new connection may take over early then).
        _ = s.connection { $0.closeFrameReceived(code: 1001, reason: "going away") }
        #expect(s.link.phase == .open && s.renewal.successorReady)
        let abandoned = s.takeRenewalAbandoned()
        let took = s.renewalTookOver(now: t(3), wallMillis: 0)
        #expect(!abandoned && took != nil)
    }

    /// The new connection is a connection like the current one: its heartbeat runs from its
    /// upgrade (a silent one is found dead before it could take over), and the same heartbeat
    /// goes on when it takes over; the old one keeps its close handshake until it ended.
    @Test func theNewConnectionHasItsOwnHeartbeatAndTakesItWithItAtTheTakeover() throws {
        var s = self.supervisor()
        try self.open(&s)
        let started = s.startRenewal(why: "lifetime", now: t(2))
        let none = s.otherHeartbeat(now: t(2))
        #expect(started && none == nil, "no heartbeat before its upgrade")
        s.otherUpgraded(now: t(3))
        // Its first ping 10 s after its upgrade, then 5 s for anything to come.
        let first = s.otherHeartbeat(now: t(3))
        let ping = s.otherHeartbeat(now: t(13))
        let waiting = s.otherHeartbeat(now: t(13))
        #expect(first == .wait(until: t(13)) && ping == .sendPing(payload: 1) && waiting == .wait(until: t(18)))
        let dead = s.otherHeartbeat(now: t(18))
        #expect(dead == .dead(silence: .seconds(15)), "nothing since its upgrade")
        // Its pong in time: alive; it takes over, its heartbeat with it (the next ping is its own).
        var t2 = self.supervisor()
        try self.open(&t2)
        _ = t2.startRenewal(why: "lifetime", now: t(2))
        t2.otherUpgraded(now: t(3))
        _ = t2.otherHeartbeat(now: t(13))
        let rtt = t2.otherPong(payload: 1, now: t(13.5))
        #expect(rtt == .milliseconds(500))
        t2.renewalReady(sent: [])
        let took = t2.renewalTookOver(now: t(14), wallMillis: 0)
        let next = t2.heartbeat(now: t(14))
        // A new heartbeat would ping 10 s after the takeover (t(24)); its own pings at t(23).
        #expect(took != nil && next == .wait(until: t(23)), "the new connection's heartbeat, not a new one")
        // The old one: no heartbeat; its close frame goes once; the server's echo ends it.
        let old = t2.otherHeartbeat(now: t(30))
        let close = t2.renewalClosingOld()
        let again = t2.renewalClosingOld()
        #expect(old == nil && close == .sendClose(code: 1000, reason: "renewed") && again == nil && !t2.otherMayWrite)
        let echo = t2.otherCloseFrameReceived(code: 1000, reason: "")
        let waitingFor = t2.renewalOldEnded()
        #expect(echo == LinkStateMachine.Action.none && waitingFor == nil && t2.renewal.phase == .idle)
    }

    /// The server's close frame on the new connection (before it took over) is echoed, as on
    /// any connection.
    @Test func theServersCloseOnTheNewConnectionIsEchoed() throws {
        var s = self.supervisor()
        try self.open(&s)
        _ = s.startRenewal(why: "lifetime", now: t(2))
        s.otherUpgraded(now: t(3))
        let echo = s.otherCloseFrameReceived(code: 1013, reason: "try again later")
        #expect(echo == .sendClose(code: 1013, reason: "") && !s.otherMayWrite)
    }

    /// A link open at t(1) whose renewal took over at t(3): the old connection closes.
    func tookOver() throws -> LinkSupervisor {
        var s = self.supervisor()
        try self.open(&s)
        self.renewing(&s)
        let took = s.renewalTookOver(now: t(3), wallMillis: 1)
        #expect(took != nil && s.renewal.underway == "closing")
        return s
    }

    /// The old connection closes (1000 "renewed") once no request waits on it, and once only:
    /// its close handshake is its own context's.
    @Test func theOldConnectionClosesOnceItsRequestsAreAnsweredAndOnlyOnce() throws {
        var s = try self.tookOver()
        #expect(s.renewalCloseOld(requestsInFlight: 2) == .whenAnswered && s.otherMayWrite)
        #expect(s.renewalCloseOld(requestsInFlight: 0) == .now)
        let closing = s.renewalClosingOld()
        let again = s.renewalClosingOld()
        #expect(closing == .sendClose(code: 1000, reason: "renewed") && again == nil)
        #expect(!s.otherMayWrite && s.renewalCloseOld(requestsInFlight: 0) == .ignored)
    }

    /// The server closed the old connection first: ours is its echo, and nothing more goes.
    @Test func anOldConnectionTheServerClosedFirstIsNotClosedAgain() throws {
        var s = try self.tookOver()
        let echo = s.otherCloseFrameReceived(code: 1001, reason: "going away")
        let closing = s.renewalClosingOld()
        #expect(echo == .sendClose(code: 1001, reason: "") && closing == nil)
        #expect(s.renewalCloseOld(requestsInFlight: 0) == .ignored)
        // Nothing to close before a takeover, or after the old one ended.
        var before = self.supervisor()
        try self.open(&before)
        #expect(before.renewalCloseOld(requestsInFlight: 0) == .ignored)
        _ = s.renewalOldEnded()
        #expect(s.renewalCloseOld(requestsInFlight: 0) == .ignored && s.renewal.phase == .idle)
    }
}
