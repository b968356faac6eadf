import NIOCore
import Testing

@testable import WSBridgeDaemon

/// Replies keep request order while some wait for the spool; requests are paced per turn.
@Suite struct ReplyOrderTests {
    static func texts(_ lines: [ByteBuffer]) -> [String] { lines.map { String(buffer: $0) } }

    @Test func repliesPassStraightThroughWhileNothingIsHeld() {
        var order = ReplyOrder()
        let passed = order.add(ByteBuffer(string: "a"))
        #expect(passed.map { String(buffer: $0) } == "a")
        #expect(order.bytes == 0)
        #expect(order.isEmpty)
    }

    @Test func aHeldReplyKeepsEveryLaterOneBehindItUntilFilled() {
        var order = ReplyOrder()
        let first = order.hold()
        let b = order.add(ByteBuffer(string: "bb"))
        #expect(b == nil)
        let third = order.hold()
        let d = order.add(ByteBuffer(string: "dddd"))
        #expect(d == nil)
        #expect(order.bytes == 2 * ReplyOrder.slotBytes + 6)
        // The later ticket first: nothing moves, it waits behind the first.
        let early = order.fill(third, with: ByteBuffer(string: "ccc"))
        #expect(early.isEmpty)
        #expect(order.bytes == ReplyOrder.slotBytes + 9)
        let released = order.fill(first, with: ByteBuffer(string: "a"))
        #expect(Self.texts(released) == ["a", "bb", "ccc", "dddd"])
        #expect(order.bytes == 0)
        #expect(order.isEmpty)
        // Filling again, or after the order moved on, does nothing.
        let again = order.fill(first, with: ByteBuffer(string: "again"))
        #expect(again.isEmpty)
    }

    @Test func ticketsFromBeforeRemoveAllAreIgnored() {
        var order = ReplyOrder()
        let old = order.hold()
        order.removeAll()
        #expect(order.bytes == 0)
        let new = order.hold()
        #expect(old != new)
        let stale = order.fill(old, with: ByteBuffer(string: "stale"))
        #expect(stale.isEmpty)
        let fresh = order.fill(new, with: ByteBuffer(string: "fresh"))
        #expect(Self.texts(fresh) == ["fresh"])
    }

    @Test func aTurnEndsAfterLinesPerTurnRequestsAndAgainOnlyAfterThePause() {
        var pacing = RequestPacing()
        #expect((1..<RequestPacing.linesPerTurn).allSatisfy { _ in !pacing.handled() })
        let ended = pacing.handled()
        #expect(ended, "the 128th request ends the turn")
        #expect(pacing.paused)
        // Lines handled from the backlog while paused start no second pause.
        let second = pacing.handled()
        #expect(!second)
        pacing.readComplete()
        #expect(pacing.paused, "a read ending does not end the pause")
        pacing.pauseEnded()
        #expect(!pacing.paused)
        #expect((1..<RequestPacing.linesPerTurn).allSatisfy { _ in !pacing.handled() })
    }

    @Test func aClientThatSendsAFewRequestsPerReadNeverPauses() {
        var pacing = RequestPacing()
        var pauses = 0
        for _ in 0..<1000 {
            if pacing.handled() { pauses += 1 }
            pacing.readComplete()
        }
        #expect(pauses == 0)
    }
}
