import Logging
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing
import WSBridgeCore
import WSBridgeProtocol

@testable import WSBridgeDaemon

/// The link's driver on an `EmbeddedEventLoop`: each connection an `EmbeddedChannel` whose
/// upgrade completes when the test says, the server's frames written into it as bytes, the
/// loop's clock advanced by hand. No server, no sleep.
@Suite struct UpstreamLinkDriverTests {
    /// A dialer of `EmbeddedChannel`s: every attempt's channel and the promise of its upgrade.
    final class EmbeddedDialer: UpstreamDialer {
        struct Dial {
            let channel: EmbeddedChannel
            let upgrade: EventLoopPromise<UpstreamConnector.Handshake>
            /// When the link dialed it (the loop's clock).
            let at: NIODeadline

            /// The upgrade completes.
            func upgraded() {
                self.upgrade.succeed(.init(channel: self.channel, subprotocol: nil, deflate: nil))
            }

            /// The server sends a frame (unmasked, as servers do): its opcode (1 text, 8 close).
            func receive(_ opcode: UInt8, _ payload: [UInt8]) throws {
                var buffer = ByteBuffer()
                buffer.writeInteger(0x80 | opcode)
                precondition(payload.count < 126)
                buffer.writeInteger(UInt8(payload.count))
                buffer.writeBytes(payload)
                try self.channel.writeInbound(buffer)
            }

            func receive(text: String) throws { try self.receive(0x1, Array(text.utf8)) }

            /// The server's close frame.
            func receiveClose(_ code: UInt16, _ reason: String = "") throws {
                try self.receive(0x8, [UInt8(code >> 8), UInt8(code & 0xFF)] + Array(reason.utf8))
            }

            /// What the link wrote, frame by frame.
            func written() throws -> [WebSocketFrame] {
                var frames: [WebSocketFrame] = []
                while let frame = try self.channel.readOutbound(as: WebSocketFrame.self) { frames.append(frame) }
                return frames
            }
        }

        let loop: EmbeddedEventLoop
        private let dials: NIOLoopBoundBox<[Dial]>

        init(loop: EmbeddedEventLoop) {
            self.loop = loop
            self.dials = NIOLoopBoundBox([], eventLoop: loop)
        }

        var all: [Dial] { self.dials.value }
        var last: Dial { self.dials.value.last! }

        func prepare(configuration: Configuration, on eventLoop: any EventLoop) -> EventLoopFuture<any PreparedConnection> {
            eventLoop.makeSucceededFuture(Prepared(dialer: self))
        }

        fileprivate func dialed(_ dial: Dial) { self.dials.value.append(dial) }
    }

    struct Prepared: PreparedConnection {
        let dialer: EmbeddedDialer
        var token: String? { nil }

        func connect(
            on eventLoop: any EventLoop,
            makeFrameHandler: @escaping @Sendable (any Channel, PerMessageDeflate?) throws -> UpstreamFrameHandler
        ) -> (channel: EventLoopFuture<any Channel>, handshake: EventLoopFuture<UpstreamConnector.Handshake>) {
            let channel = EmbeddedChannel(loop: self.dialer.loop)
            do {
                try channel.pipeline.syncOperations.addHandler(try makeFrameHandler(channel, nil))
            } catch {
                return (eventLoop.makeFailedFuture(error), eventLoop.makeFailedFuture(error))
            }
            let upgrade = eventLoop.makePromise(of: UpstreamConnector.Handshake.self)
            self.dialer.dialed(.init(channel: channel, upgrade: upgrade, at: self.dialer.loop.now))
            return (eventLoop.makeSucceededFuture(channel), upgrade.futureResult)
        }
    }

    /// The link's events as it told them.
    final class Events: UpstreamEventSink {
        var states: [ConnectionPhase] = []
        var closedRightAfterOpen: [Bool] = []
        var messages: [String] = []

        func upstreamLink(_ link: any LinkControl, emitted event: UpstreamEvent) {
            switch event {
            case .state(let phase, _, let early):
                self.states.append(phase)
                self.closedRightAfterOpen.append(early)
            case .message(let message):
                self.messages.append(String(buffer: message.data))
            default:
                break
            }
        }
    }

    /// A link on an `EmbeddedEventLoop`, stopped at the end of the test (its `stopped` promise
    /// kept).
    final class Harness {
        let loop = EmbeddedEventLoop()
        let dialer: EmbeddedDialer
        let events = Events()
        let link: UpstreamLink

        /// The link's events go to `events`, through the application protocol's layer when the
        /// configuration names one (as `Bridge` wires it), the layer's own to a fan-out.
        let appProtocol: AppProtocolLayer?

        convenience init(_ change: (inout Configuration) -> Void = { _ in }) {
            var configuration = Configuration()
            configuration.upstream.url = UpstreamURL(scheme: .ws, host: "127.0.0.1", port: 9, path: "/")
            change(&configuration)
            self.init(configuration)
        }

        init(_ configuration: Configuration) {
            var logger = Logger(label: "wsbridge.test")
            logger.logLevel = .critical
            let loop = self.loop
            self.dialer = EmbeddedDialer(loop: loop)
            self.appProtocol = makeAppProtocolSession(configuration.applicationProtocol).map {
                AppProtocolLayer(
                    session: $0, fanout: Fanout(configuration: configuration.local, status: SystemdStatus(), eventLoop: loop),
                    requests: PendingRequests(eventLoop: loop), eventLoop: loop, logger: logger)
            }
            self.link = UpstreamLink(
                configuration: configuration, networkAvailable: true, eventLoop: self.loop, logger: logger, connectors: self.dialer,
                events: self.appProtocol ?? self.events)
        }

        deinit {
            _ = self.link.shutdown()
            self.loop.run()
            self.loop.advanceTime(by: UpstreamLink.closeTimeout)
            precondition(self.link.phase == .stopped, "the link did not stop: \(self.link.phase)")
        }

        /// Connects and opens the first connection.
        func open() -> EmbeddedDialer.Dial {
            self.link.connect()
            self.loop.run()
            self.dialer.last.upgraded()
            self.loop.run()
            return self.dialer.last
        }
    }

    @Test func aLateUpgradeOfAnAbandonedAttemptIsIgnored() throws {
        let h = Harness()
        h.link.connect()
        h.loop.run()
        let first = h.dialer.last
        // Asked to reconnect while the first attempt is still upgrading: a second attempt.
        h.link.reconnect()
        h.loop.run()
        #expect(h.dialer.all.count == 2)
        let second = h.dialer.last
        // The first one's upgrade completes late: its channel is closed, the link not opened.
        first.upgraded()
        h.loop.run()
        #expect(!first.channel.isActive && h.link.phase == .connecting)
        // A frame from the abandoned connection reaches nobody.
        try? first.receive(text: "stale")
        #expect(h.events.messages.isEmpty)
        second.upgraded()
        h.loop.run()
        #expect(h.link.phase == .open)
        try second.receive(text: "fresh")
        #expect(h.events.messages == ["fresh"])
    }

    @Test func noMessageMatchingTheReadyGateInTimeFailsTheAttempt() throws {
        let h = Harness {
            $0.upstream.readyWhen = Filter(parsing: "type=ready")
            $0.upstream.readyTimeout = .seconds(5)
        }
        h.link.connect()
        h.loop.run()
        h.dialer.last.upgraded()
        h.loop.run()
        #expect(h.link.phase == .connecting)
        try h.dialer.last.receive(text: #"{"type":"hello"}"#)
        h.loop.advanceTime(by: .seconds(4))
        #expect(h.link.phase == .connecting)
        h.loop.advanceTime(by: .seconds(1))
        #expect(h.link.phase == .backingOff)
        #expect(h.link.status.lastErrorReason == "not_ready")
    }

    @Test func theReadyGateOpensTheLink() throws {
        let h = Harness { $0.upstream.readyWhen = Filter(parsing: "type=ready") }
        h.link.connect()
        h.loop.run()
        h.dialer.last.upgraded()
        h.loop.run()
        try h.dialer.last.receive(text: #"{"type":"ready"}"#)
        #expect(h.link.phase == .open)
        // The gate's message reached the subscribers before the open state.
        #expect(h.events.messages == [#"{"type":"ready"}"#] && h.events.states == [.connecting, .open])
    }

    @Test func anOperatorsCloseDuringTheReadyWaitStaysClosed() throws {
        let h = Harness { $0.upstream.readyWhen = Filter(parsing: "type=ready") }
        h.link.connect()
        h.loop.run()
        let dial = h.dialer.last
        dial.upgraded()
        h.loop.run()
        h.link.close(code: 1000, reason: "operator")
        h.loop.run()
        #expect(h.link.phase == .idle && !dial.channel.isActive)
        // The ready message comes late, and the ready timeout would have passed: nothing moves.
        try? dial.receive(text: #"{"type":"ready"}"#)
        h.loop.advanceTime(by: .seconds(60))
        #expect(h.link.phase == .idle && h.dialer.all.count == 1)
    }

    @Test func aSilentLinkIsDeadAtTheHeartbeatDeadlineAndReconnects() throws {
        let h = Harness {
            $0.heartbeat.interval = .seconds(2)
            $0.heartbeat.deadline = .seconds(1)
        }
        let dial = h.open()
        h.loop.advanceTime(by: .seconds(2))
        // A ping went, with an 8-byte payload.
        let pings = try dial.written().filter { $0.opcode == .ping }
        #expect(pings.count == 1 && pings.first?.data.readableBytes == 8)
        h.loop.advanceTime(by: .seconds(1))
        #expect(h.link.phase == .backingOff)
        #expect(h.link.status.lastClose?.reason.hasPrefix("heartbeat deadline passed") == true)
        #expect(!dial.channel.isActive)
    }

    /// A server's close after the link was open for `openFor` seconds (stable_after 30 s): right
    /// after open it is a failed attempt, told as such; later it is none.
    @Test(arguments: [(openFor: 0, failedAttempts: 1, rightAfterOpen: true), (openFor: 31, failedAttempts: 0, rightAfterOpen: false)])
    func aServerCloseIsAFailedAttemptOnlyRightAfterOpen(_ c: (openFor: Int64, failedAttempts: Int, rightAfterOpen: Bool)) throws {
        let h = Harness {
            $0.backoff.policy = BackoffPolicy(base: .seconds(1), cap: .seconds(8), stableAfter: .seconds(30))
            $0.heartbeat.interval = .seconds(100)
        }
        let dial = h.open()
        h.loop.advanceTime(by: .seconds(c.openFor))
        try dial.receiveClose(1008, "policy")
        // The close is echoed; the server then ends TCP.
        #expect(try dial.written().contains { $0.opcode == .connectionClose })
        try dial.channel.close().wait()
        h.loop.run()
        #expect(h.link.phase == .backingOff)
        #expect(h.link.status.failedAttempts == c.failedAttempts)
        #expect(h.events.closedRightAfterOpen.last == c.rightAfterOpen)
    }

    @Test func shutdownWhileConnectingStopsAtOnce() throws {
        let h = Harness()
        h.link.connect()
        h.loop.run()
        let stopped = h.link.shutdown()
        h.loop.run()
        #expect(h.link.phase == .stopped)
        try stopped.wait()
        // A late upgrade finds nothing to open.
        h.dialer.last.upgraded()
        h.loop.run()
        #expect(h.link.phase == .stopped && !h.dialer.last.channel.isActive)
    }

    @Test func shutdownWhileOpenClosesWith1001AndStopsWhenTheServerEndsTCP() throws {
        let h = Harness()
        let dial = h.open()
        _ = try dial.written()
        let stopped = h.link.shutdown()
        h.loop.run()
        #expect(h.link.phase == .closing)
        let close = try dial.written().first { $0.opcode == .connectionClose }
        var data = close?.data
        #expect(data?.readInteger(as: UInt16.self) == 1001)
        // No answer from the server: the link ends TCP itself after its close timeout.
        h.loop.advanceTime(by: UpstreamLink.closeTimeout)
        #expect(h.link.phase == .stopped)
        try stopped.wait()
    }

    @Test func shutdownWhileBackingOffCancelsTheRetry() throws {
        let h = Harness()
        h.link.connect()
        h.loop.run()
        try h.dialer.last.channel.close().wait()
        h.loop.run()
        #expect(h.link.phase == .backingOff)
        _ = h.link.shutdown()
        h.loop.run()
        #expect(h.link.phase == .stopped)
        h.loop.advanceTime(by: .seconds(120))
        #expect(h.dialer.all.count == 1)
    }

    @Test func shutdownWhileWaitingForTheReadyGateStops() throws {
        let h = Harness { $0.upstream.readyWhen = Filter(parsing: "type=ready") }
        h.link.connect()
        h.loop.run()
        h.dialer.last.upgraded()
        h.loop.run()
        _ = h.link.shutdown()
        h.loop.run()
        #expect(h.link.phase == .stopped && !h.dialer.last.channel.isActive)
    }

    @Test func aServerSilentPastItsProtocolKeepaliveDeadlineIsADeadLink() throws {
        // Socket.IO: the Engine.IO open packet sets the deadline (pingInterval + pingTimeout).
        let configuration = try ConfigurationLoader(fileName: "test.toml").load(text: "[upstream]\nurl = \"ws://127.0.0.1:9/\"\nprotocol = \"socketio\"\n")
        let h = Harness(configuration)
        h.link.connect()
        h.loop.run()
        let dial = h.dialer.last
        dial.upgraded()
        h.loop.run()
        // The link's opening message is Socket.IO's connect; its answer is the ready gate.
        #expect(try dial.written().compactMap { $0.opcode == .text ? String(buffer: $0.data) : nil } == ["40"])
        try dial.receive(text: #"0{"sid":"e1","upgrades":[],"pingInterval":2000,"pingTimeout":1500,"maxPayload":1000000}"#)
        try dial.receive(text: #"40{"sid":"s1"}"#)
        #expect(h.link.phase == .open)
        // The server's pings keep it alive (each answered), past several deadlines.
        for _ in 0..<3 {
            h.loop.advanceTime(by: .seconds(2))
            try dial.receive(text: "2")
        }
        #expect(h.link.phase == .open)
        // (Sends are flushed once per loop tick.)
        h.loop.run()
        let answers = try dial.written().compactMap { $0.opcode == .text ? String(buffer: $0.data) : nil }
        #expect(answers == ["3", "3", "3"], "\(answers)")
        // Then silence: dead within two deadlines, and a new connection is tried.
        h.loop.advanceTime(by: .milliseconds(7000))
        #expect(!dial.channel.isActive && h.dialer.all.count == 2)
        #expect(h.link.status.lastError?.contains("past the keepalive deadline") == true, "\(String(describing: h.link.status.lastError))")
    }
}
