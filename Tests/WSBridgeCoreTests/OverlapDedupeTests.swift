import Testing

@testable import WSBridgeCore

/// A renewal's overlap (issue 44): the old and the new connection's messages, each delivered once
/// and in order, and when the new one has caught up.
@Suite struct OverlapDedupeTests {
    /// The overlap and what it delivered, in order.
    struct Overlap {
        var dedupe: OverlapDedupe<String>
        var delivered: [String] = []

        init(paths: [String] = ["stream", "data.u"], window: Int = 100) {
            self.dedupe = OverlapDedupe(paths: paths, window: window)
        }

        mutating func old(_ text: String) { self.take(text, .old) }
        mutating func new(_ text: String) { self.take(text, .new) }
        mutating func takeOver() { self.delivered += self.dedupe.takeOver() }

        private mutating func take(_ text: String, _ side: OverlapDedupe<String>.Side) {
            if let out = Array(text.utf8).withUnsafeBytes({ self.dedupe.admit(text, bytes: $0, from: side) }) { self.delivered.append(out) }
        }
    }

    static func e(_ stream: String, _ u: Int, extra: String = "") -> String { #"{"stream":"\#(stream)","data":{"u":\#(u)\#(extra)}}"# }

    @Test func eachEventIsDeliveredOnceAndInOrderWhicheverConnectionIsAhead() {
        var o = Overlap()
        // Before the takeover the old connection's go; the new one's are matched, or held when
        // it is ahead (3), and delivered after the old one's when it takes over.
        o.old(Self.e("a", 1))
        o.new(Self.e("a", 1))
        o.new(Self.e("a", 2))
        o.new(Self.e("a", 3))
        o.old(Self.e("a", 2))
        o.takeOver()
        // After it, the new connection's go; the old one's events are dropped.
        o.old(Self.e("a", 3))
        o.new(Self.e("a", 4))
        o.old(Self.e("a", 4))
        o.old(Self.e("a", 5))
        o.new(Self.e("a", 5))
        #expect(o.delivered == [1, 2, 3, 4, 5].map { Self.e("a", $0) })
        #expect(o.dedupe.dropped == 5)
    }

    @Test func thePathsTellEventsApartWhateverElseTheyCarry() {
        var o = Overlap()
        // The same event, its other fields differing (a server's own time): one event.
        o.old(Self.e("a", 1, extra: #","E":1"#))
        o.new(Self.e("a", 1, extra: #","E":2"#))
        // Another stream's update 1 is another event (held: the new connection is ahead).
        o.new(Self.e("b", 1))
        o.takeOver()
        #expect(o.delivered == [Self.e("a", 1, extra: #","E":1"#), Self.e("b", 1)])
    }

    @Test func withoutPathsTheBytesTellAndTheSameMessageTwiceOnOneConnectionComesTwice() {
        var o = Overlap(paths: [])
        o.old("tick")
        o.old("tick")
        // Matched one to one: the new connection's first two ticks are the old's two.
        o.new("tick")
        o.new("tick")
        o.new("tick")
        o.takeOver()
        #expect(o.delivered == ["tick", "tick", "tick"])
    }

    @Test func anAnswerOnTheOldConnectionAfterTheTakeoverIsDelivered() {
        var o = Overlap()
        o.old(Self.e("a", 1))
        o.new(Self.e("a", 1))
        o.takeOver()
        // A request sent on the old connection is answered there: no stream, so not the new one's.
        o.old(#"{"result":[],"id":7}"#)
        o.old(Self.e("a", 2))
        #expect(o.delivered == [Self.e("a", 1), #"{"result":[],"id":7}"#])
    }

    @Test func theNewConnectionHasCaughtUpOnceEveryStreamTheOldDeliveredCameOnIt() {
        var o = Overlap()
        o.old(Self.e("a", 1))
        o.old(Self.e("b", 1))
        #expect(!o.dedupe.caughtUp)
        o.new(Self.e("a", 1))
        #expect(!o.dedupe.caughtUp && o.dedupe.behind() == ["\"b\""])
        // A later event on the new connection proves nothing: the old one may bring the ones
        // before it yet (it lags), and they would be lost if the new one took over now.
        o.new(Self.e("b", 5))
        #expect(!o.dedupe.caughtUp)
        o.old(Self.e("b", 2))
        o.old(Self.e("b", 3))
        o.old(Self.e("b", 4))
        o.old(Self.e("b", 5))
        #expect(o.dedupe.caughtUp)
        o.takeOver()
        #expect(o.delivered == [Self.e("a", 1), Self.e("b", 1), Self.e("b", 2), Self.e("b", 3), Self.e("b", 4), Self.e("b", 5)])
        // Answers (no paths) are no stream.
        var answers = Overlap()
        answers.old(#"{"result":null,"id":1}"#)
        answers.old(Self.e("a", 1))
        answers.new(Self.e("a", 1))
        #expect(answers.dedupe.caughtUp)
    }

    @Test func eachSideRemembersAndHoldsAtMostItsWindow() {
        var o = Overlap(paths: [], window: 3)
        for n in 1...5 { o.old("m\(n)") }
        // m1 and m2 were forgotten: the new connection's are held as new ones; m3..m5 matched.
        for n in 1...5 { o.new("m\(n)") }
        #expect(o.dedupe.dropped == 3 && !o.dedupe.isFull)
        o.new("m6")
        #expect(o.dedupe.isFull)
        o.takeOver()
        #expect(o.delivered == ["m1", "m2", "m3", "m4", "m5", "m1", "m2", "m6"])
    }

    @Test func theStreamsItTracksAreBoundedByTheWindowWhateverTheFeedNames() {
        var o = Overlap(window: 3)
        for n in 1...10 { o.old(Self.e("stream-\(n)", 1)) }
        // At most 3 tracked, each by its hash; the names kept for the log are the feed's.
        let behind = o.dedupe.behind(limit: 10)
        #expect(behind.count == 3 && behind.allSatisfy { $0.hasPrefix("\"stream-") }, "\(behind)")
    }
}
