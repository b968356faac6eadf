import Testing

@testable import WSBridgeCore

/// A renewal's overlap over its whole life (`RenewalOverlap`): the dedupe while both connections
/// are open, its moment after the old one ended, a renewal begun within that moment, a failed
/// one, and the count of duplicates dropped across them. The link (the wire's messages) and the
/// protocol layer (what messages deliver) both go by it.
@Suite struct RenewalOverlapTests {
    struct Feed {
        var overlap = RenewalOverlap<String>()
        var delivered: [String] = []

        mutating func begin() { self.overlap.begin(paths: ["stream", "data.u"], window: 100) }
        /// A message of the link's current connection.
        mutating func current(_ u: Int) { self.take(u, fromCurrent: true) }
        /// A message of the renewal's other connection (the new one, then the old one).
        mutating func other(_ u: Int) { self.take(u, fromCurrent: false) }
        mutating func takeOver() { self.delivered += self.overlap.takeOver() }

        private mutating func take(_ u: Int, fromCurrent: Bool) {
            let text = OverlapDedupeTests.e("a", u)
            if let out = Array(text.utf8).withUnsafeBytes({ self.overlap.admit(text, bytes: $0, fromCurrent: fromCurrent) }) {
                self.delivered.append(out)
            }
        }

        var ticks: [Int] { self.delivered.map { Int($0.split(separator: ":").last!.dropLast(2))! } }

        /// A renewal whose old connection was ahead (it delivered 1 and 2, the new one had 1),
        /// taken over, its old connection ended: its moment is on.
        static func inTheMomentAfterAnOldConnectionAhead() -> Feed {
            var f = Feed()
            f.begin()
            f.current(1)
            f.current(2)
            f.other(1)
            f.takeOver()
            f.overlap.oldEnded()
            return f
        }
    }

    @Test func withNoOverlapEveryMessageGoesAsItCame() {
        var f = Feed()
        f.current(1)
        f.current(1)
        #expect(f.ticks == [1, 1])
        #expect(!f.overlap.isOverlapping)
    }

    @Test func aRenewalDeliversEachOnceThenItsMomentDropsWhatTheOldOneDeliveredFirst() {
        var f = Feed()
        f.current(1)
        f.begin()
        // The current connection is the old one: it delivers; the new one matches, then is ahead.
        f.current(2)
        f.other(2)
        f.other(3)
        #expect(f.overlap.dedupe?.caughtUp == true)
        f.takeOver()
        #expect(f.overlap.tookOver)
        // The old one (now the other) still brings 3 and 4; the new one (current) brings 4 too.
        f.other(3)
        f.other(4)
        f.current(4)
        f.current(5)
        // The old connection ends: for a moment the current one's messages still meet its dedupe.
        f.overlap.oldEnded()
        #expect(f.overlap.isOverlapping && !f.overlap.tookOver)
        f.current(6)
        f.overlap.endTail()
        #expect(!f.overlap.isOverlapping)
        f.current(7)
        #expect(f.ticks == [1, 2, 3, 4, 5, 6, 7])
        #expect(f.overlap.duplicatesDropped == 3)
    }

    @Test func theMomentCatchesAnEventTheOldConnectionDeliveredFirst() {
        var f = Feed.inTheMomentAfterAnOldConnectionAhead()
        // Now the new connection (current) brings 2: the old one delivered it, so it is dropped.
        f.current(2)
        f.current(3)
        #expect(f.ticks == [1, 2, 3])
        // Once the moment is over a message really sent twice comes twice.
        f.overlap.endTail()
        f.current(3)
        #expect(f.ticks == [1, 2, 3, 3])
        #expect(f.overlap.duplicatesDropped == 2)
    }

    @Test func aRenewalBegunWithinTheMomentKeepsItUntilItsOwnTakeover() {
        var f = Feed.inTheMomentAfterAnOldConnectionAhead()
        // The next renewal begins within the moment: the current connection (the one that took
        // over) still brings 2, which the last old connection delivered: dropped.
        f.begin()
        f.current(2)
        f.current(3)
        f.other(3)
        f.takeOver()
        // From its takeover the moment is over: the current connection is the new one, and what
        // it sends is compared with its own overlap's old connection only. That one brought 2
        // too (the moment dropped it, and the overlap counted it as the old one's), so the new
        // one's 2 is the same event again: dropped, matched one to one; 4 is new.
        f.current(2)
        f.current(4)
        #expect(f.ticks == [1, 2, 3, 4])
        #expect(f.overlap.duplicatesDropped == 4)
    }

    @Test func aFailedRenewalEndsItsOverlapAndKeepsTheLastMoment() {
        var f = Feed.inTheMomentAfterAnOldConnectionAhead()
        f.begin()
        f.other(5)
        f.overlap.failed()
        #expect(f.overlap.dedupe == nil)
        // The last moment still drops what its old connection delivered first.
        f.current(2)
        f.current(3)
        #expect(f.ticks == [1, 2, 3])
        f.overlap.end()
        #expect(!f.overlap.isOverlapping)
        f.current(3)
        #expect(f.ticks == [1, 2, 3, 3])
    }

    /// A renewal begun within the last one's moment while the connection that took over is still
    /// behind on a stream (it brings again what the old one delivered first): the moment drops
    /// those, but the new overlap still counts them as the current connection's on that stream.
    /// Else the next connection, ahead and caught up on another stream only, took over there and
    /// what lay between on the first was lost (the current one's next messages of it dropped as
    /// the new one's, which began after them).
    @Test func whatTheMomentDropsStillCountsForTheNextOverlapsCatchUp() {
        var o = RenewalOverlap<String>()
        var delivered: [String] = []
        func admit(_ stream: String, _ u: Int, current: Bool) {
            let text = OverlapDedupeTests.e(stream, u)
            if let out = Array(text.utf8).withUnsafeBytes({ o.admit(text, bytes: $0, fromCurrent: current) }) { delivered.append(out) }
        }
        // A (current) and B: B matches a:1 and b:1, takes over; A ends: its moment is on.
        o.begin(paths: ["stream", "data.u"], window: 100)
        for u in 1...5 {
            admit("a", u, current: true)
            admit("b", u, current: true)
        }
        admit("a", 1, current: false)
        admit("b", 1, current: false)
        #expect(o.dedupe?.caughtUp == true)
        delivered += o.takeOver()
        o.oldEnded()
        // C begins while B (now current) is behind on a: it brings a:2 to a:5 again (dropped).
        o.begin(paths: ["stream", "data.u"], window: 100)
        for u in 2...5 { admit("a", u, current: true) }
        // C is ahead on both; B catches up with it on b only.
        admit("a", 20, current: false)
        for u in 6...8 { admit("b", u, current: false) }
        for u in 2...6 { admit("b", u, current: true) }
        #expect(o.dedupe?.caughtUp == false, "B is still behind C on a: a:6 to a:19 would be lost")
        // B catches up on a too: now C may take over, and nothing is lost or doubled.
        for u in 6...20 { admit("a", u, current: true) }
        #expect(o.dedupe?.caughtUp == true)
        delivered += o.takeOver()
        let a = delivered.filter { $0.contains(#""a""#) }
        #expect(a.count == 20, "\(a)")
    }
}
