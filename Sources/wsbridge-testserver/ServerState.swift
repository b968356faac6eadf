import NIOCore
import NIOWebSocket

#if canImport(Glibc)
    import Glibc
#endif

/// The server's shared state, confined to its single event loop.
final class ServerState {
    var echo: Bool
    /// Event lines for messages carry their receive time: `message@NANOSECONDS TEXT`
    /// (CLOCK_MONOTONIC, the clock every process on the machine shares), for latency benchmarks.
    var stamp = false
    var answerPings = true
    /// `linger on`: after a close handshake the server keeps TCP open (a misbehaving server), so
    /// a client's data after its close frame would show up as `message ...`.
    var linger = false
    var refuse = false
    /// `poison TEXT`: a text message containing TEXT makes the server close that connection
    /// (4400 "poison"), as a server does with a message it cannot take.
    var poison: String?
    /// `acks SIZE`: a Socket.IO emit with an ack id (`42N[...]`, `42/ns,N[...]`) is answered
    /// with its ack of SIZE bytes (nil: off).
    var ackSize: Int?
    var acks = 0
    /// `acks SIZE HOLD`: the acks are held until HOLD of them are ready, then written at once (a
    /// flood of acks, as `flood` is of messages).
    var ackHold: Int?
    var heldAcks: [ByteBuffer] = []
    private var clients: [ObjectIdentifier: any Channel] = [:]
    /// Connections we sent a close frame to: their close frame is the reply, not to be answered.
    private(set) var closing: Set<ObjectIdentifier> = []
    private var ticker: Scheduled<Void>?
    private var tickCount = 0

    init(echo: Bool, stamp: Bool = false) {
        self.echo = echo
        self.stamp = stamp
    }

    /// `channel` is sent a close frame: its answer is not to be answered.
    func closeOne(_ channel: any Channel) {
        self.closing.insert(ObjectIdentifier(channel))
    }

    func added(_ channel: any Channel) {
        self.clients[ObjectIdentifier(channel)] = channel
        Output.line("connected \(self.clients.count)")
    }

    func removed(_ channel: any Channel) {
        self.closing.remove(ObjectIdentifier(channel))
        if self.clients.removeValue(forKey: ObjectIdentifier(channel)) != nil {
            Output.line("disconnected \(self.clients.count)")
        }
    }

    func broadcast(_ opcode: WebSocketOpcode, _ data: ByteBuffer) {
        for channel in self.clients.values {
            channel.writeAndFlush(WebSocketFrame(fin: true, opcode: opcode, data: data), promise: nil)
        }
    }

    /// Messages the ticker still sends before it stops by itself (nil: no limit).
    private var tickerRemaining: Int?

    func startTicker(rate: Int, size: Int, count: Int? = nil, loop: any EventLoop) {
        self.ticker?.cancel()
        self.tickerRemaining = count
        guard rate > 0 else { return }
        // One timer per millisecond at most; higher rates send a batch per tick.
        let period = max(1_000_000_000 / rate, 1_000_000)
        let perTick = max(1, rate / (1_000_000_000 / period))
        self.scheduleTick(period: Int64(period), perTick: perTick, size: size, loop: loop)
    }

    private func scheduleTick(period: Int64, perTick: Int, size: Int, loop: any EventLoop) {
        self.ticker = loop.assumeIsolated().scheduleTask(in: TimeAmount.nanoseconds(period)) {
            for _ in 0..<perTick {
                if let remaining = self.tickerRemaining {
                    if remaining == 0 {
                        self.ticker = nil
                        Output.line("ticker done \(self.tickCount)")
                        return
                    }
                    self.tickerRemaining = remaining - 1
                }
                self.tickCount += 1
                var text = "{\"tick\":\(self.tickCount),\"pad\":\""
                let pad = max(0, size - text.utf8.count - 2)
                text += String(repeating: "x", count: pad) + "\"}"
                self.broadcast(.text, ByteBuffer(string: text))
            }
            self.scheduleTick(period: period, perTick: perTick, size: size, loop: loop)
        }
    }

    func command(_ command: String, _ args: [String], loop: any EventLoop) {
        switch command {
        case "send":
            self.broadcast(.text, ByteBuffer(string: args.joined(separator: " ")))
        case "sendx":
            // `sendx TEXT`: TEXT with \n, \r, \0 and \\ unescaped (a text protocol's frame).
            var out = ""
            var escaping = false
            for c in args.joined(separator: " ") {
                if escaping {
                    out.append(c == "n" ? "\n" : c == "r" ? "\r" : c == "0" ? "\0" : c)
                    escaping = false
                } else if c == "\\" {
                    escaping = true
                } else {
                    out.append(c)
                }
            }
            self.broadcast(.text, ByteBuffer(string: out))
        case "ticker":
            if args.first == "off" {
                self.ticker?.cancel()
                self.ticker = nil
            } else {
                let rest = args.count > 1 ? args[1].split(separator: " ").compactMap { Int($0) } : []
                self.startTicker(rate: Int(args.first ?? "") ?? 1, size: rest.first ?? 64, count: rest.count > 1 ? rest[1] : nil, loop: loop)
            }
        case "acks":
            // The arguments come as one (`acks 100 4000`).
            let numbers = args.joined(separator: " ").split(separator: " ").map { Int($0) }
            self.ackSize = numbers.first ?? nil
            self.ackHold = numbers.count > 1 ? numbers[1] : nil
            self.heldAcks = []
        case "poison":
            self.poison = args.isEmpty ? nil : args.joined(separator: " ")
        case "close":
            let code = UInt16(args.first ?? "") ?? 1000
            var data = ByteBuffer()
            data.writeInteger(code)
            data.writeString(args.dropFirst().joined(separator: " "))
            for (id, channel) in self.clients {
                self.closing.insert(id)
                channel.writeAndFlush(WebSocketFrame(fin: true, opcode: .connectionClose, data: data), promise: nil)
            }
        case "burst":
            // `burst N [SIZE]`: N numbered messages at once, for ordering and loss tests.
            let n = Int(args.first ?? "") ?? 100
            let size = args.count > 1 ? Int(args[1]) ?? 64 : 64
            for _ in 0..<n {
                self.tickCount += 1
                var text = "{\"n\":\(self.tickCount),\"pad\":\""
                text += String(repeating: "x", count: max(0, size - text.utf8.count - 2)) + "\"}"
                let frame = WebSocketFrame(fin: true, opcode: .text, data: ByteBuffer(string: text))
                for channel in self.clients.values { channel.write(frame, promise: nil) }
            }
            for channel in self.clients.values { channel.flush() }
            Output.line("burst done \(self.tickCount)")
        case "flood":
            // `flood COUNT SIZE [RATE [ID]] [FORMAT]`: the benchmark generator (FloodWriter), then
            // `__end__`; ID: every message carries `"id":ID` (routed to a subscription's holders
            // under a protocol); FORMAT: socketio, stomp or nats (the JSON inside their messages).
            let words = args.joined(separator: " ").split(separator: " ")
            let numbers = words.compactMap { Int($0) }
            let format = words.first { Int($0) == nil }.map(String.init) ?? "json"
            let (count, size, rate) = (numbers.first ?? 100_000, numbers.count > 1 ? numbers[1] : 100, numbers.count > 2 ? numbers[2] : 0)
            for channel in self.clients.values {
                if let flood = try? channel.pipeline.syncOperations.handler(type: FloodWriter.self) {
                    flood.start(count: count, size: size, rate: rate, id: numbers.count > 3 ? numbers[3] : nil, format: format)
                }
            }
        case "drop":
            for channel in self.clients.values { channel.close(promise: nil) }
        case "pings":
            self.answerPings = args.first != "off"
        case "refuse":
            self.refuse = args.first != "off"
        case "linger":
            self.linger = args.first != "off"
        case "stall":
            // `stall on`: stop reading from every client (a slow upstream); `stall off`: read again.
            let read = args.first == "off"
            for channel in self.clients.values {
                channel.setOption(ChannelOptions.autoRead, value: read).whenSuccess { if read { channel.read() } }
            }
            Output.line("stall \(read ? "off" : "on")")
        case "oversize":
            let n = Int(args.first ?? "") ?? (17 << 20)
            self.broadcast(.binary, ByteBuffer(repeating: 0x61, count: n))
        case "count":
            Output.line("clients \(self.clients.count)")
        default:
            Output.line("error unknown command '\(command)'")
        }
    }
}

/// One client connection after the upgrade.
final class ServerConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private let state: NIOLoopBound<ServerState>
    private var closeSent = false

    init(state: NIOLoopBound<ServerState>) {
        self.state = state
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.state.value.added(context.channel)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.state.value.removed(context.channel)
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = Self.unwrapInboundIn(data)
        switch frame.opcode {
        case .text, .binary:
            let payload = frame.unmaskedData
            if frame.opcode == .text {
                if self.state.value.stamp {
                    var now = timespec()
                    clock_gettime(CLOCK_MONOTONIC, &now)
                    Output.line("message@\(Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)) \(String(buffer: payload))")
                } else {
                    Output.line("message \(String(buffer: payload))")
                }
            } else {
                Output.line("binary \(payload.readableBytes)")
            }
            if frame.opcode == .text, let poison = self.state.value.poison, String(buffer: payload).contains(poison) {
                var data = ByteBuffer()
                data.writeInteger(UInt16(4400))
                data.writeString("poison")
                self.state.value.closeOne(context.channel)
                context.writeAndFlush(Self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: data)), promise: nil)
                return
            }
            if frame.opcode == .text, let size = self.state.value.ackSize, let ack = self.ack(payload, size: size) {
                if let hold = self.state.value.ackHold {
                    self.state.value.heldAcks.append(ack)
                    if self.state.value.heldAcks.count >= hold {
                        for held in self.state.value.heldAcks {
                            context.write(Self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: .text, data: held)), promise: nil)
                        }
                        context.flush()
                        self.state.value.heldAcks = []
                    }
                } else {
                    context.writeAndFlush(Self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: .text, data: ack)), promise: nil)
                }
            }
            if self.state.value.echo {
                context.writeAndFlush(Self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: frame.opcode, data: payload)), promise: nil)
            }
        case .ping:
            Output.line("ping")
            if self.state.value.answerPings {
                context.writeAndFlush(Self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData)), promise: nil)
            }
        case .connectionClose:
            var data = frame.unmaskedData
            let code = data.readableBytes >= 2 ? data.readInteger(as: UInt16.self).map(String.init) ?? "-" : "none"
            let reason = data.readString(length: data.readableBytes) ?? ""
            Output.line("closed \(code) \(reason)")
            // Reply (if we did not start the close) and end the TCP connection, as the server should.
            if self.state.value.closing.contains(ObjectIdentifier(context.channel)) {
                if !self.state.value.linger { context.close(promise: nil) }
                return
            }
            var reply = ByteBuffer()
            if code != "none", let c = UInt16(code) { reply.writeInteger(c) }
            context.writeAndFlush(Self.wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: reply))).assumeIsolated().whenComplete { _ in
                context.close(promise: nil)
            }
        default:
            break
        }
    }

    /// The ack of a Socket.IO emit with an ack id (`42N[`, `42/ns,N[`), `size` bytes; nil for any
    /// other message.
    private func ack(_ payload: ByteBuffer, size: Int) -> ByteBuffer? {
        let bytes = Array(payload.readableBytesView)
        guard bytes.starts(with: Array("42".utf8)) else { return nil }
        var i = 2
        var namespace: [UInt8] = []
        if i < bytes.count, bytes[i] == UInt8(ascii: "/"), let comma = bytes[i...].firstIndex(of: UInt8(ascii: ",")) {
            namespace = Array(bytes[i...comma])
            i = comma + 1
        }
        let digits = bytes[i...].prefix { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
        guard !digits.isEmpty, i + digits.count < bytes.count, bytes[i + digits.count] == UInt8(ascii: "[") else { return nil }
        self.state.value.acks += 1
        var head = Array("43".utf8) + namespace + digits + Array(#"[{"n":\#(self.state.value.acks),"pad":""#.utf8)
        head += [UInt8](repeating: UInt8(ascii: "x"), count: max(0, size - head.count - 3))
        return ByteBuffer(bytes: head + Array(#""}]"#.utf8))
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        Output.line("error \(error)")
        context.close(promise: nil)
    }
}

@available(*, unavailable)
extension ServerConnectionHandler: Sendable {}

@available(*, unavailable)
extension ServerState: Sendable {}
