import Testing
import WSBridgeCore

@Suite struct SubscriberQueueTests {
    /// A run of lines as strings (each string's UTF-8 bytes its size).
    struct Lines: QueuedLines, Equatable {
        var lines: [String]
        init(_ lines: String...) { self.lines = lines }
        init(_ lines: [String]) { self.lines = lines }
        var lineCount: Int { self.lines.count }
        func lineStart(_ i: Int) -> Int { self.lines[..<i].reduce(0) { $0 + $1.utf8.count } }
    }

    typealias Queue = SubscriberQueue<Lines>

    /// Everything the queue hands out, line by line, with drop notices spelled as
    /// "dropped N from-to"; `maxBytes` bounds each take of message lines.
    static func drain(_ queue: inout Queue, maxBytes: Int = .max) -> [String] {
        var out: [String] = []
        while let next = queue.next(maxBytes: maxBytes) {
            switch next {
            case .control(let line): out += line.lines
            case .dropped(let d): out.append("dropped \(d.count) \(d.from)-\(d.to)")
            case .messages(let lines, let range): out += lines.lines[range]
            }
        }
        return out
    }

    /// Messages one per run, seq `seqs`, each spelled "m<seq>".
    static func append(_ seqs: ClosedRange<Int>, to queue: inout Queue) -> Int {
        seqs.reduce(0) { $0 + queue.appendMessages(Lines("m\($1)"), seq: UInt64($1)) }
    }

    @Test func messagesAndRepliesKeepTheirArrivalOrder() {
        var q = Queue(limits: .init(messages: 10, bytes: 1000))
        q.appendControl(Lines("hello"))
        q.appendMessages(Lines("m1"), seq: 1)
        q.appendControl(Lines("reply"))
        q.appendMessages(Lines("m2", "m3"), seq: 2)
        q.appendControl(Lines("state"))
        #expect(q.messageCount == 3)
        #expect(q.messageBytes == 6)
        #expect(q.controlBytes == 15)
        #expect(Self.drain(&q) == ["hello", "m1", "reply", "m2", "m3", "state"])
        #expect(q.isEmpty)
        #expect(q.messageCount == 0 && q.messageBytes == 0 && q.controlBytes == 0)
    }

    /// A run is one entry, handed out in parts of whole lines within the byte bound (a line
    /// larger than the bound alone), in order.
    @Test func aRunGoesOutInPartsOfWholeLines() {
        var q = Queue(limits: .init(messages: 100, bytes: 1000))
        q.appendMessages(Lines("aa", "bb", "cccccc", "dd"), seq: 7)
        #expect(q.next(maxBytes: 5) == .messages(Lines("aa", "bb", "cccccc", "dd"), 0..<2))
        #expect(q.messageCount == 2 && q.messageBytes == 8)
        #expect(q.next(maxBytes: 5) == .messages(Lines("aa", "bb", "cccccc", "dd"), 2..<3))
        #expect(q.next(maxBytes: 5) == .messages(Lines("aa", "bb", "cccccc", "dd"), 3..<4))
        #expect(q.next(maxBytes: 5) == nil)
        #expect(q.isEmpty)
    }

    /// The writers' fast path takes the next message lines across runs (a run cut at the byte
    /// bound), and stops at a reply and at a `dropped` notice; mixed with `next()` the order is
    /// still the arrival order.
    @Test func takingMessagesStopsAtRepliesNoticesAndTheByteBound() {
        var q = Queue(limits: .init(messages: 6, bytes: 1000))
        q.appendMessages(Lines("m1"), seq: 1)
        q.appendMessages(Lines("m2", "m3"), seq: 2)
        q.appendControl(Lines("r1"))
        q.appendMessages(Lines("m4"), seq: 4)
        var taken: [String] = []
        func take(_ maxBytes: Int) -> Int { q.takeMessages(maxBytes: maxBytes) { lines, range in taken += lines.lines[range] } }
        #expect(take(5) == 2 && taken == ["m1", "m2"])  // the byte bound, inside a run
        #expect(q.messageCount == 2)
        #expect(take(100) == 1 && taken == ["m1", "m2", "m3"])  // the reply comes next
        #expect(take(100) == 0)
        #expect(Self.drain(&q) == ["r1", "m4"])
        #expect(Self.append(5...12, to: &q) == 2)  // 5 and 6 dropped
        #expect(take(100) == 0)  // the notice comes first
        #expect(q.next() == .dropped(.init(count: 2, from: 5, to: 6)))
        #expect(take(100) == 6 && taken.suffix(6) == ["m7", "m8", "m9", "m10", "m11", "m12"])
        #expect(q.isEmpty && q.messageBytes == 0 && q.messageCount == 0)
    }

    @Test func overflowDropsTheOldestMessagesAndKeepsReplies() {
        var q = Queue(limits: .init(messages: 3, bytes: 1000))
        q.appendMessages(Lines("m1"), seq: 1)
        q.appendControl(Lines("r1"))
        q.appendMessages(Lines("m2"), seq: 2)
        q.appendControl(Lines("r2"))
        q.appendMessages(Lines("m3"), seq: 3)
        #expect(q.appendMessages(Lines("m4"), seq: 4) == 1)
        #expect(q.appendMessages(Lines("m5"), seq: 5) == 1)
        #expect(q.messageCount == 3)
        #expect(q.controlCount == 2)
        // The replies stay where they were; the notice comes right before the next message.
        #expect(Self.drain(&q) == ["r1", "r2", "dropped 2 1-2", "m3", "m4", "m5"])
    }

    /// Drops take a run's first lines and leave the rest of it queued; the notice's seqs count
    /// through the runs.
    @Test func overflowDropsTheFirstLinesOfARun() {
        var q = Queue(limits: .init(messages: 4, bytes: 1000))
        #expect(q.appendMessages(Lines("m1", "m2", "m3"), seq: 1) == 0)
        #expect(q.appendMessages(Lines("m4", "m5", "m6"), seq: 4) == 2)
        #expect(q.messageCount == 4 && q.messageBytes == 8)
        #expect(q.appendMessages(Lines("m7", "m8"), seq: 7) == 2)
        #expect(Self.drain(&q) == ["dropped 4 1-4", "m5", "m6", "m7", "m8"])
    }

    /// A run larger than the bounds keeps its newest lines; a single line over the byte bound
    /// still goes out.
    @Test func aRunOverTheBoundsKeepsItsNewestLines() {
        var q = Queue(limits: .init(messages: 2, bytes: 1000))
        #expect(q.appendMessages(Lines(["a1", "a2", "a3", "a4", "a5"]), seq: 10) == 3)
        #expect(Self.drain(&q) == ["dropped 3 10-12", "a4", "a5"])
        var b = Queue(limits: .init(messages: 100, bytes: 10))
        #expect(b.appendMessages(Lines("small", "huge-huge-huge"), seq: 1) == 1)
        #expect(Self.drain(&b) == ["dropped 1 1-1", "huge-huge-huge"])
    }

    @Test func theByteLimitDropsToo() {
        var q = Queue(limits: .init(messages: 100, bytes: 10))
        for seq in 1...6 { q.appendMessages(Lines("mm\(seq)_"), seq: UInt64(seq)) }
        #expect(q.messageBytes == 8)
        #expect(Self.drain(&q) == ["dropped 4 1-4", "mm5_", "mm6_"])
        // Within a run, by the line.
        q.appendMessages(Lines("aaaa", "bbbb", "cccc", "dd"), seq: 7)
        #expect(q.messageBytes == 10 && q.messageCount == 3)
        #expect(Self.drain(&q) == ["dropped 1 7-7", "bbbb", "cccc", "dd"])
    }

    @Test func oneNoticeCoversEveryDropSinceTheLast() {
        var q = Queue(limits: .init(messages: 2, bytes: 1000))
        #expect(Self.append(1...10, to: &q) == 8)
        #expect(Self.drain(&q) == ["dropped 8 1-8", "m9", "m10"])
        // After the notice went out, the next drops get a notice of their own.
        #expect(Self.append(11...14, to: &q) == 2)
        #expect(Self.drain(&q) == ["dropped 2 11-12", "m13", "m14"])
    }

    @Test func aNoticeWithNoMessageLeftStillGoesOut() {
        var q = Queue(limits: .init(messages: 5, bytes: 1000))
        q.appendMessages(Lines("m1", "m2", "m3"), seq: 1)
        q.appendControl(Lines("r"))
        q.limits = .init(messages: 0, bytes: 0)
        // Shrinking the limits drops all but the newest message.
        #expect(q.trimToLimits() == 2)
        #expect(Self.drain(&q) == ["dropped 2 1-2", "m3", "r"])
    }

    @Test func aLongStallCostsOnlyTheBoundAndEveryDropIsCounted() {
        var q = Queue(limits: .init(messages: 4096, bytes: 1 << 30))
        q.appendControl(Lines("hello"))
        var dropped = 0
        let run = Lines(Array(repeating: "m", count: 100))
        for n in 0..<10_000 {
            dropped += q.appendMessages(run, seq: UInt64(n * 100 + 1))
            if (n + 1) % 1000 == 0 { q.appendControl(Lines("state \(n + 1)")) }
        }
        #expect(dropped == 1_000_000 - 4096)
        #expect(q.messageCount == 4096)
        #expect(q.messageBytes == 4096)
        let out = Self.drain(&q, maxBytes: 1000)
        // hello, then the state lines whose neighbouring messages were dropped, then the notice
        // and the newest 4096 messages with the last state line at its place.
        #expect(out.first == "hello")
        #expect(out.contains("dropped \(1_000_000 - 4096) 1-\(1_000_000 - 4096)"))
        #expect(out.filter { $0 == "m" }.count == 4096)
        #expect(out.last == "state 10000")
    }

    /// A queue that held a lag's worth of runs frees that storage once it drains (by `next` or
    /// by `takeMessages`), and goes on in order; one that held a few keeps its storage.
    @Test func aDrainedLagLetsItsStorageGo() {
        var q = Queue(limits: .init(messages: 4096, bytes: 1 << 20))
        _ = Self.append(1...3, to: &q)
        #expect(Self.drain(&q) == ["m1", "m2", "m3"])
        #expect(q.entriesSinceRelease == 3)
        _ = Self.append(4...1003, to: &q)
        q.appendControl(Lines("r"))
        #expect(q.entriesSinceRelease == 1001)
        #expect(q.takeMessages(maxBytes: .max) { _, _ in } == 1000)
        #expect(q.entriesSinceRelease == 1001)  // the reply is still queued
        #expect(Self.drain(&q) == ["r"])
        #expect(q.entriesSinceRelease == 0)
        _ = Self.append(1004...1200, to: &q)
        #expect(q.takeMessages(maxBytes: .max) { _, _ in } == 197)
        #expect(q.entriesSinceRelease == 0)
        _ = Self.append(1201...1202, to: &q)
        #expect(Self.drain(&q) == ["m1201", "m1202"])
    }

    @Test func removeAllForgetsEverything() {
        var q = Queue(limits: .init(messages: 1, bytes: 100))
        q.appendMessages(Lines("m1", "m2"), seq: 1)
        q.appendControl(Lines("r"))
        q.removeAll()
        #expect(q.isEmpty)
        #expect(q.messageCount == 0)
        #expect(q.next() == nil)
    }

    @Test func wouldOverflowLooksAtBothLimits() {
        var q = Queue(limits: .init(messages: 3, bytes: 10))
        #expect(!q.wouldOverflow(adding: 3, bytes: 10))
        #expect(q.wouldOverflow(adding: 1, bytes: 11))
        #expect(q.wouldOverflow(adding: 4, bytes: 4))
        q.appendMessages(Lines("a", "bb"), seq: 1)
        #expect(!q.wouldOverflow(adding: 1, bytes: 7))
        #expect(q.wouldOverflow(adding: 2, bytes: 1))
    }

    /// Lines younger than the burst are kept past the count (never past the bytes); once the
    /// oldest is older, the count bounds again and the oldest go first.
    @Test func aBurstIsKeptPastTheCountUntilItIsOld() {
        var q = Queue(limits: .init(messages: 3, bytes: 1000, burstNanoseconds: 100, burstMessages: 100))
        // Ten runs within the burst's 100 ns: none dropped, none would overflow by count.
        for n in 1...10 { #expect(q.appendMessages(Lines("m\(n)"), seq: UInt64(n), now: UInt64(n)) == 0) }
        #expect(q.messageCount == 10 && !q.wouldOverflow(adding: 1, bytes: 2, now: 100))
        // At 101 the first (came at 1) is old; so is every run of this burst by 111.
        #expect(q.wouldOverflow(adding: 1, bytes: 2, now: 101))
        #expect(q.appendMessages(Lines("m11"), seq: 11, now: 101) == 1, "only the one that is old")
        #expect(q.trimToLimits(now: 111) == 7)
        #expect(Self.drain(&q) == ["dropped 8 1-8", "m9", "m10", "m11"])
        // A burst keeps at most `burstMessages`, the oldest of it going first.
        var capped = Queue(limits: .init(messages: 2, bytes: 1000, burstNanoseconds: 1_000, burstMessages: 4))
        for n in 1...6 { _ = capped.appendMessages(Lines("m\(n)"), seq: UInt64(n), now: 0) }
        #expect(capped.wouldOverflow(adding: 1, bytes: 2, now: 0))
        #expect(Self.drain(&capped) == ["dropped 2 1-2", "m3", "m4", "m5", "m6"])
        // The bytes bound a burst too: 4 bytes, runs of 2.
        var small = Queue(limits: .init(messages: 1, bytes: 4, burstNanoseconds: 1_000, burstMessages: 100))
        for n in 1...5 { _ = small.appendMessages(Lines("m\(n)"), seq: UInt64(n), now: 0) }
        #expect(Self.drain(&small) == ["dropped 3 1-3", "m4", "m5"])
        // No burst: the count always bounds.
        var none = Queue(limits: .init(messages: 3, bytes: 1000))
        for n in 1...5 { _ = none.appendMessages(Lines("m\(n)"), seq: UInt64(n), now: UInt64(n)) }
        #expect(Self.drain(&none) == ["dropped 2 1-2", "m3", "m4", "m5"])
    }
}
