import Testing
import WSBridgeCore

@Suite struct SubscriberQueueTests {
    typealias Queue = SubscriberQueue<String>

    /// Everything the queue hands out, with drop notices spelled as "dropped N from-to".
    static func drain(_ queue: inout Queue) -> [String] {
        var out: [String] = []
        while let next = queue.next() {
            switch next {
            case .line(let line): out.append(line)
            case .dropped(let d): out.append("dropped \(d.count) \(d.from)-\(d.to)")
            }
        }
        return out
    }

    @Test func messagesAndRepliesKeepTheirArrivalOrder() {
        var q = Queue(limits: .init(messages: 10, bytes: 1000))
        q.appendControl("hello", bytes: 5)
        q.appendMessage("m1", bytes: 2, seq: 1)
        q.appendControl("reply", bytes: 5)
        q.appendMessage("m2", bytes: 2, seq: 2)
        q.appendMessage("m3", bytes: 2, seq: 3)
        q.appendControl("state", bytes: 5)
        #expect(q.messageCount == 3)
        #expect(q.messageBytes == 6)
        #expect(q.controlBytes == 15)
        #expect(Self.drain(&q) == ["hello", "m1", "reply", "m2", "m3", "state"])
        #expect(q.isEmpty)
        #expect(q.messageBytes == 0 && q.controlBytes == 0)
    }

    /// The writers' fast path takes runs of messages, and stops at a reply, at a `dropped`
    /// notice and at the byte bound; mixed with `next()` the order is still the arrival order.
    @Test func runsOfMessagesStopAtRepliesNoticesAndTheByteBound() {
        var q = Queue(limits: .init(messages: 5, bytes: 1000))
        q.appendMessage("m1", bytes: 2, seq: 1)
        q.appendMessage("m2", bytes: 2, seq: 2)
        q.appendControl("r1", bytes: 2)
        q.appendMessage("m3", bytes: 2, seq: 3)
        var taken: [String] = []
        var out: [String] = []
        func take(_ maxBytes: Int) -> Int { q.takeMessages(maxBytes: maxBytes) { taken.append($0) } }
        #expect(take(3) == 1 && taken == ["m1"])  // the byte bound
        #expect(take(100) == 1 && taken == ["m1", "m2"])  // the reply comes next
        #expect(take(100) == 0)
        out = Self.drain(&q)
        #expect(out == ["r1", "m3"])
        for seq in 4...10 { q.appendMessage("m\(seq)", bytes: 2, seq: UInt64(seq)) }  // 4 and 5 dropped
        #expect(take(100) == 0)  // the notice comes first
        #expect(q.next() == .dropped(.init(count: 2, from: 4, to: 5)))
        #expect(take(100) == 5 && taken.suffix(5) == ["m6", "m7", "m8", "m9", "m10"])
        #expect(q.isEmpty && q.messageBytes == 0)
    }

    @Test func overflowDropsTheOldestMessagesAndKeepsReplies() {
        var q = Queue(limits: .init(messages: 3, bytes: 1000))
        q.appendMessage("m1", bytes: 2, seq: 1)
        q.appendControl("r1", bytes: 2)
        q.appendMessage("m2", bytes: 2, seq: 2)
        q.appendControl("r2", bytes: 2)
        q.appendMessage("m3", bytes: 2, seq: 3)
        #expect(q.appendMessage("m4", bytes: 2, seq: 4) == 1)
        #expect(q.appendMessage("m5", bytes: 2, seq: 5) == 1)
        #expect(q.messageCount == 3)
        #expect(q.controlCount == 2)
        // The replies stay where they were; the notice comes right before the next message.
        #expect(q.nextSize == 2)
        #expect(Self.drain(&q) == ["r1", "r2", "dropped 2 1-2", "m3", "m4", "m5"])
        #expect(q.nextSize == nil)
    }

    @Test func theByteLimitDropsToo() {
        var q = Queue(limits: .init(messages: 100, bytes: 10))
        for seq in 1...6 { q.appendMessage("m\(seq)", bytes: 4, seq: UInt64(seq)) }
        #expect(q.messageBytes == 8)
        #expect(Self.drain(&q) == ["dropped 4 1-4", "m5", "m6"])
    }

    @Test func aSingleMessageOverTheByteLimitStillGoesOut() {
        var q = Queue(limits: .init(messages: 100, bytes: 10))
        q.appendMessage("small", bytes: 5, seq: 1)
        #expect(q.appendMessage("huge", bytes: 50, seq: 2) == 1)
        #expect(Self.drain(&q) == ["dropped 1 1-1", "huge"])
    }

    @Test func oneNoticeCoversEveryDropSinceTheLast() {
        var q = Queue(limits: .init(messages: 2, bytes: 1000))
        for seq in 1...10 { q.appendMessage("m\(seq)", bytes: 1, seq: UInt64(seq)) }
        #expect(Self.drain(&q) == ["dropped 8 1-8", "m9", "m10"])
        // After the notice went out, the next drops get a notice of their own.
        for seq in 11...14 { q.appendMessage("m\(seq)", bytes: 1, seq: UInt64(seq)) }
        #expect(Self.drain(&q) == ["dropped 2 11-12", "m13", "m14"])
    }

    @Test func aNoticeWithNoMessageLeftStillGoesOut() {
        var q = Queue(limits: .init(messages: 5, bytes: 1000))
        for seq in 1...3 { q.appendMessage("m\(seq)", bytes: 1, seq: UInt64(seq)) }
        q.appendControl("r", bytes: 1)
        q.limits = .init(messages: 0, bytes: 0)
        // Shrinking the limits drops all but the newest message.
        #expect(q.trimToLimits() == 2)
        #expect(Self.drain(&q) == ["dropped 2 1-2", "m3", "r"])
    }

    @Test func aLongStallCostsOnlyTheBoundAndEveryDropIsCounted() {
        var q = Queue(limits: .init(messages: 4096, bytes: 1 << 30))
        q.appendControl("hello", bytes: 5)
        var dropped = 0
        for seq in 1...1_000_000 {
            dropped += q.appendMessage("m", bytes: 100, seq: UInt64(seq))
            if seq % 100_000 == 0 { q.appendControl("state \(seq)", bytes: 10) }
        }
        #expect(dropped == 1_000_000 - 4096)
        #expect(q.messageCount == 4096)
        #expect(q.messageBytes == 4096 * 100)
        let out = Self.drain(&q)
        // hello, then the state lines whose neighbouring messages were dropped, then the notice
        // and the newest 4096 messages with the last state line at its place.
        #expect(out.first == "hello")
        #expect(out.contains("dropped \(1_000_000 - 4096) 1-\(1_000_000 - 4096)"))
        #expect(out.filter { $0 == "m" }.count == 4096)
        #expect(out.last == "state 1000000")
    }

    @Test func removeAllForgetsEverything() {
        var q = Queue(limits: .init(messages: 1, bytes: 100))
        q.appendMessage("m1", bytes: 1, seq: 1)
        q.appendMessage("m2", bytes: 1, seq: 2)
        q.appendControl("r", bytes: 1)
        q.removeAll()
        #expect(q.isEmpty)
        #expect(q.next() == nil)
    }

    @Test func wouldOverflowLooksAtBothLimits() {
        var q = Queue(limits: .init(messages: 2, bytes: 10))
        #expect(!q.wouldOverflow(adding: 10))
        #expect(q.wouldOverflow(adding: 11))
        q.appendMessage("a", bytes: 3, seq: 1)
        q.appendMessage("b", bytes: 3, seq: 2)
        #expect(q.wouldOverflow(adding: 1))
    }
}
