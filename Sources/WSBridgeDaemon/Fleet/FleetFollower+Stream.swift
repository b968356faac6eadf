import CNATS
import Logging
import NIOConcurrencyHelpers
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// What the follower's consumer brings: each message of the stream, or a bridge's takeover, handed
/// to the fan-out under its seq in the stream.
extension FleetFollower {
    /// What the stream holds at a seq: an upstream message, or a bridge's takeover.
    enum Item {
        case message(UpstreamMessage)
        case takeover(leader: String, previous: String?)
        /// For one follower's app (`holder/app`): the bridge's protocol layer routed it.
        case routed(to: String, UpstreamMessage)
    }

    struct Incoming {
        var messages: [(generation: Int, seq: UInt64, item: Item, streamSeq: UInt64)] = []
        var scheduled = false
        /// Messages came past `maxIncoming` and were dropped: the consumer is made again.
        var overflowed = false
    }

    /// Messages held between the client's thread and the loop, at most.
    static let maxIncoming = 65_536

    /// A message of the consumer as the fan-out takes it (on the client's thread; it owns the
    /// message and destroys it): each upstream message it holds under its number (a batch's,
    /// `fleet.batch`: docs/fleet.md), or under its seq in the stream when it has none; empty when
    /// it is no message of a bridge's (said in `malformed`). Its seq in the stream, when it has one.
    @discardableResult
    static func take(_ message: OpaquePointer, _ library: NATSLibrary, into taken: inout [(seq: UInt64, item: Item)]) throws(FleetBatch.Malformed)
        -> UInt64?
    {
        let api = library.api
        defer { api.natsMsg_Destroy(message) }
        var meta: UnsafeMutablePointer<jsMsgMetaData>?
        guard api.natsMsg_GetMetaData(&meta, message) == NATS_OK, let meta else { return nil }
        let streamSeq = meta.pointee.Sequence.Stream
        let millis = meta.pointee.Timestamp / 1_000_000
        api.jsMsgMetaData_Destroy(meta)
        let numbers = library.numbers(of: message)
        let seq = numbers.first ?? streamSeq
        if library.header(FleetPublisher.eventHeader, of: message) == FleetPublisher.takeover {
            let leader = library.header("Wsbridge-Leader", of: message) ?? "a bridge"
            taken.append((seq, .takeover(leader: leader, previous: library.header("Wsbridge-Previous", of: message))))
            return streamSeq
        }
        if numbers.count > 1 {
            let length = Int(api.natsMsg_GetDataLength(message))
            guard let data = api.natsMsg_GetData(message) else { throw FleetBatch.Malformed("a batch of \(numbers.count) with no bytes") }
            let bytes = UnsafeRawBufferPointer(start: data, count: length)
            for (index, item) in try FleetBatch.items(of: bytes, count: Int(numbers.count)).enumerated() {
                let upstream = UpstreamMessage(
                    kind: item.binary ? .binary : .text, data: ByteBuffer(bytes: UnsafeRawBufferPointer(rebasing: bytes[item.range])), receivedAtMillis: millis)
                taken.append((seq + UInt64(index), .message(upstream)))
            }
            return streamSeq
        }
        let kind: UpstreamMessage.Kind = library.header(FleetPublisher.kindHeader, of: message) == "binary" ? .binary : .text
        let upstream = UpstreamMessage(kind: kind, data: library.data(of: message), receivedAtMillis: millis)
        if let to = library.header(FleetPublisher.toHeader, of: message) {
            taken.append((seq, .routed(to: to, upstream)))
        } else {
            taken.append((seq, .message(upstream)))
        }
        return streamSeq
    }

    /// A message of the stream that says it is a batch and is not one: its messages are not
    /// delivered (the followers all skip it alike); said in the log and `last_error`.
    func malformed(_ error: FleetBatch.Malformed) {
        let problem =
            "a message of the stream \(self.fleet.stream) says it is a batch (Wsbridge-Batch) and is not one: \(error); its messages are not delivered (only wsbridged bridges publish on \(self.fleet.subject))"
        if self.lastError != problem { self.logger.error("fleet: \(problem)") }
        self.lastError = problem
    }

    /// Where a consumer starts to bring what follows message `after` (blocks: on the thread
    /// pool). Without batches a message's number is its stream seq, so after it; with them, the
    /// first stream seq whose messages' numbers go past `after` (numbers only grow with the
    /// stream seq, and are never below it), found by halving. Starting early is harmless (what
    /// the follower numbered already is dropped), late would lose: a message of no number is
    /// taken at the number before it (looking back at most `FleetBatch.lookBack`).
    static func startSeq(after: UInt64, _ library: NATSLibrary, _ jetStream: OpaquePointer, _ stream: String, first: UInt64, last: UInt64) throws -> UInt64 {
        guard last > 0 else { return after + 1 }
        let high = min(last, after + 1)
        let low = max(first, 1)
        // A stream no bridge batches lately: a message's number is its seq.
        guard low <= high, try library.lastNumber(jetStream, stream, from: last) != nil else { return after + 1 }
        func number(at seq: UInt64) throws -> UInt64 {
            max(seq, try library.lastNumber(jetStream, stream, from: seq) ?? seq)
        }
        guard try number(at: high) > after else { return last + 1 }
        var (lo, hi) = (low, high)
        while lo < hi {
            let mid = lo + (hi - lo) / 2
            if try number(at: mid) > after { hi = mid } else { lo = mid + 1 }
        }
        return lo
    }

    /// Hands what the consumer brought to the fan-out, in stream order, each seq once (a consumer
    /// made again may bring some again).
    func drain() {
        let (messages, overflowed) = self.incoming.withLockedValue { box in
            box.scheduled = false
            defer {
                box.messages.removeAll(keepingCapacity: true)
                box.overflowed = false
            }
            return (box.messages, box.overflowed)
        }
        guard !self.stopped, self.phase == .open || self.phase == .connecting else { return }
        for (generation, seq, item, streamSeq) in messages where generation == self.generation && seq > self.fanout.position.seq {
            self.streamSeq = max(self.streamSeq ?? 0, streamSeq)
            switch item {
            case .message(let message):
                self.received += 1
                self.traffic.received(bytes: message.data.readableBytes)
                self.fanout.publish(message, at: seq)
            case .routed(let to, let message):
                // Another follower's app's: its seq is no message here (as another app's on one host).
                guard let app = self.app(named: to), let layer = self.protocolLayer else {
                    self.fanout.skip(to: seq)
                    continue
                }
                self.received += 1
                layer.routed(message, to: app, at: seq, link: self)
            case .takeover(let leader, let previous):
                // Its seq is no message's; the subscribers hear of the gap it marks: between the
                // last message before it (the previous leader's) and the next (the new one's).
                let after = self.fanout.position.seq
                self.fanout.skip(to: seq)
                let gap = GapLine(
                    stream: self.fanout.stream, reason: GapLine.leaderChanged, after: after, next: seq + 1,
                    message:
                        "the fleet's bridge changed: \(leader) took over from \(previous ?? "a bridge that stopped renewing its lease") (fleet.standby = \"cold\"); what the upstream sent after the message at stream seq \(after) and before the one at stream seq \(seq + 1) reached no bridge"
                )
                self.fanout.announce(MessageLineEncoder.line(gap.json, allocator: self.fanout.allocator))
                self.logger.warning("fleet: \(leader) took over the stream from \(previous ?? "?") at stream seq \(seq)")
            }
        }
        self.fanout.flush()
        if overflowed && !self.stopped && self.phase != .idle {
            self.logger.warning(
                "fleet: the stream's messages came faster than this follower took them; following again from seq \(self.fanout.position.seq + 1)")
            self.subscribe()
        }
    }
}
