import Foundation
import NIOCore
import NIOWebSocket
import WSBridgeCore
import WSBridgeProtocol

/// The WebSocket face's apps as the fan-out sees them: every message published (a broadcast)
/// to each of them as a frame (text or binary as it came), and, with `upstream.protocol`, what
/// the protocol layer routes to one app as a frame for that app only (docs/websocket.md).
/// The frames of the messages published since the last flush are written one after another in
/// one buffer: each message is framed once, and every app is handed the same bytes. An app's
/// routed frames wait in its own buffer until the flush, and go before any broadcast framed
/// after them (a routed frame first sends the broadcasts framed before it).
struct FrameFanout {
    private(set) var apps: [WebSocketApp] = []
    private var byID: [Int: WebSocketApp] = [:]
    private var unsent = ByteBuffer()
    private var unsentCount = 0
    /// The apps with routed frames waiting for the flush.
    private var routed: [WebSocketApp] = []
    /// The frames of this flush the replay ring keeps (no NDJSON line was written for them):
    /// where each is in `unsent`; and those of the frames sent, for the ring (`drainKept`).
    private var keeping: [Keeping] = []
    private var kept: [ReplayRing.Entry] = []
    private struct Keeping {
        var seq: UInt64
        var start: Int
        var end: Int
        var receivedAtMillis: Int64
    }
    private let allocator = ByteBufferAllocator()
    /// With `upstream.protocol`, the opcode of every frame (`AppProtocolFace.binaryFrames`);
    /// nil (raw): text or binary as each message came.
    var opcode: WebSocketOpcode?

    var isEmpty: Bool { self.apps.isEmpty }
    var hasRouted: Bool { !self.routed.isEmpty }

    func app(_ id: Int) -> WebSocketApp? { self.byID.isEmpty ? nil : self.byID[id] }

    mutating func add(_ app: WebSocketApp) {
        self.apps.append(app)
        self.byID[app.id] = app
    }

    mutating func remove(_ app: WebSocketApp) {
        self.apps.removeAll { $0 === app }
        self.byID[app.id] = nil
        self.routed.removeAll { $0 === app }
    }

    /// Frames `message` (`seq`) behind the others of this flush; `keep`: the replay ring keeps
    /// its frame (no line is written for it).
    mutating func append(_ message: UpstreamMessage, seq: UInt64, keep: Bool) {
        if self.unsentCount == 0 { self.unsent = self.allocator.buffer(capacity: message.data.readableBytes + 10) }
        let start = self.unsent.writerIndex
        ServerFrame.write(self.opcode ?? (message.kind == .text ? .text : .binary), message.data, into: &self.unsent)
        self.unsentCount += 1
        if keep { self.keeping.append(Keeping(seq: seq, start: start, end: self.unsent.writerIndex, receivedAtMillis: message.receivedAtMillis)) }
    }

    /// The frames sent that the ring keeps, into `ring`.
    mutating func drainKept(into ring: inout ReplayRing) {
        guard !self.kept.isEmpty else { return }
        for entry in self.kept { ring.append(entry) }
        self.kept.removeAll(keepingCapacity: true)
    }

    /// `data` as a frame for `app` only (text, or `opcode`), behind the broadcasts framed before it. True
    /// when it is the first routed frame since the last flush (the caller sees a flush comes).
    @discardableResult
    mutating func route(_ data: ByteBuffer, to app: WebSocketApp) -> Bool {
        if self.unsentCount > 0 { self.flushBroadcasts() }
        if app.routed.frames.readableBytes == 0 {
            app.routed.frames = self.allocator.buffer(capacity: data.readableBytes + 10)
            self.routed.append(app)
        }
        ServerFrame.write(self.opcode ?? .text, data, into: &app.routed.frames)
        app.routed.messages += 1
        return self.routed.count == 1
    }

    /// The frames of this flush to every app: each app's routed ones first (framed before the
    /// broadcasts waiting: a routed frame sends those before it is framed), then the broadcasts.
    mutating func flush() {
        if !self.routed.isEmpty { self.flushRouted() }
        self.flushBroadcasts()
    }

    mutating func flushRouted() {
        let apps = self.routed
        self.routed.removeAll(keepingCapacity: true)
        for app in apps {
            let waiting = app.routed
            app.routed = .init()
            app.deliver(waiting.frames, messages: waiting.messages)
        }
    }

    private mutating func flushBroadcasts() {
        guard self.unsentCount > 0 else { return }
        let (frames, count) = (self.unsent, self.unsentCount)
        for k in self.keeping {
            let frame = frames.getSlice(at: k.start, length: k.end - k.start)!
            self.kept.append(ReplayRing.Entry(seq: k.seq, bytes: frame, isFrame: true, receivedAtMillis: k.receivedAtMillis))
        }
        self.keeping.removeAll(keepingCapacity: true)
        self.unsent = ByteBuffer()
        self.unsentCount = 0
        for app in self.apps { app.deliver(frames, messages: count) }
    }
}

extension Fanout {
    /// A message the protocol layer routed to WebSocket app `app` (its bytes as the app's
    /// library reads them): false when `app` is not one of the face's.
    func deliverToWebSocketApp(_ app: AppID, data: ByteBuffer) -> Bool {
        guard let target = self.frames.app(app) else { return false }
        if self.frames.route(data, to: target) {
            // Should no read end come (a message from elsewhere than a socket read), the loop's
            // next turn sends it.
            self.eventLoop.assumeIsolated().execute { self.flush() }
        }
        return true
    }
}

extension Fanout {
    /// The messages after `seq` the replay ring holds, as frames, and how many (a raw app's
    /// resume, `?stream=ID&since=SEQ`); nil when the ring no longer holds seq + 1.
    func framesFromRing(after seq: UInt64) -> (ByteBuffer, Int)? {
        guard let oldest = self.ring.oldestSeq, oldest <= seq + 1 else { return nil }
        var frames = ByteBuffer()
        var count = 0
        for entry in self.ring.entries where entry.seq > seq {
            if entry.isFrame {
                frames.writeImmutableBuffer(entry.bytes)
            } else {
                let message = Self.message(of: entry)
                ServerFrame.write(message.kind == .text ? .text : .binary, message.data, into: &frames)
            }
            count += 1
        }
        return (frames, count)
    }

    /// A ring entry's NDJSON line: the one kept, or made from the frame kept (a replay to an
    /// NDJSON consumer of what only the face's apps were there for).
    func ringLine(_ entry: ReplayRing.Entry) -> ByteBuffer {
        guard entry.isFrame else { return entry.bytes }
        let message = Self.message(of: entry)
        let parsed = self.configuration.inlineJSON && message.kind == .text ? try? JSONValue.parse(message.data.readableBytesView) : nil
        return MessageLineEncoder.message(seq: entry.seq, message, inlineJSON: self.configuration.inlineJSON, parsed: parsed, allocator: self.allocator)
    }

    /// The message a ring entry keeps, from its frame or its line (`MessageLine`: a text
    /// payload inline as `json` comes back as that JSON written out, a binary one from base64).
    /// The ring holds only what the fan-out wrote: an entry that reads as neither is a bug (a
    /// debug build stops; a release one passes its bytes on as they are).
    static func message(of entry: ReplayRing.Entry) -> UpstreamMessage {
        if entry.isFrame, let (opcode, payload) = ServerFrame.payload(of: entry.bytes) {
            return UpstreamMessage(kind: opcode == .binary ? .binary : .text, data: payload, receivedAtMillis: entry.receivedAtMillis)
        }
        guard !entry.isFrame, let json = try? JSONValue.parse(entry.bytes.readableBytesView), let line = MessageLine(json: json) else {
            assertionFailure("the replay ring holds seq \(entry.seq) as neither a frame nor a message line")
            return UpstreamMessage(kind: .text, data: entry.bytes, receivedAtMillis: entry.receivedAtMillis)
        }
        switch line.kind {
        case .binary:
            return UpstreamMessage(kind: .binary, data: ByteBuffer(bytes: Data(base64Encoded: line.data ?? "") ?? Data()), receivedAtMillis: line.ts)
        case .text:
            return UpstreamMessage(kind: .text, data: ByteBuffer(string: line.data ?? line.inlineJSON?.serialized ?? ""), receivedAtMillis: line.ts)
        }
    }
}
