/// A renewal's overlap over its whole life, as messages meet it (docs/limits.md, "Renewal"): the
/// dedupe (`OverlapDedupe`) of the old and the new connection from the renewal's start until the
/// old connection ended, then that dedupe a moment more (the tail) for what the connection that
/// took over still brings that the old one delivered first. A renewal that begins within that
/// moment keeps the tail: the current connection's messages pass it first, then the new
/// overlap's dedupe. The tail ends at its moment's end, or when the next renewal's connection
/// takes over (the connection it watched is then the old one).
///
/// One rule for both owners: the link, which compares the wire's messages (no protocol), and the
/// protocol layer, which compares what a message delivers as apps see it (it supplies the bytes
/// a message is known by). Which connection a message came from is all they tell it: the current
/// one (the old one until the takeover, then the new) or the other. Pure: no clock, no I/O; the
/// owner's timer ends the tail.
package struct RenewalOverlap<Message> {
    /// The overlap under way: from the renewal's start until its old connection ended (or the
    /// renewal failed).
    package private(set) var dedupe: OverlapDedupe<Message>?
    /// The last overlap's dedupe, its old connection ended: the current connection's messages
    /// pass it until its moment ends.
    private var tail: OverlapDedupe<Message>?
    /// Duplicates dropped by the overlaps that ended.
    private var droppedBefore = 0

    package init() {}

    /// Messages are compared (an overlap is under way, or the last one's moment is not over).
    package var isOverlapping: Bool { self.dedupe != nil || self.tail != nil }

    /// The overlap's new connection took over.
    package var tookOver: Bool { self.dedupe?.tookOver ?? false }

    /// Duplicates dropped by every overlap so far.
    package var duplicatesDropped: Int { self.droppedBefore + (self.dedupe?.dropped ?? 0) + (self.tail?.dropped ?? 0) }

    /// A renewal begins (`upstream.dedupe`'s `paths`, `upstream.dedupe_window`). The last
    /// overlap's tail stays; an overlap still under way is over.
    package mutating func begin(paths: [String], window: Int) {
        self.droppedBefore += self.dedupe?.dropped ?? 0
        self.dedupe = OverlapDedupe(paths: paths, window: window)
    }

    /// `message` (known by `bytes`) from the current connection or the other one, when it is
    /// delivered now: nil when the other connection delivered it (a duplicate), or when the new
    /// connection is ahead and it waits for the takeover.
    package mutating func admit(_ message: Message, bytes: UnsafeRawBufferPointer, fromCurrent: Bool) -> Message? {
        var message = message
        if fromCurrent, self.tail != nil {
            // The last overlap's old connection may have delivered it first.
            guard let kept = self.tail!.admit(message, bytes: bytes, from: .new) else {
                // Not again; but the overlap under way still counts it as the current
                // connection's: it is there on that stream, and the new one has not caught up
                // with it until they meet (taking over sooner lost what lay between).
                if self.dedupe?.tookOver == false { _ = self.dedupe!.admit(message, bytes: bytes, from: .old) }
                return nil
            }
            message = kept
        }
        guard self.dedupe != nil else { return message }
        // The current connection is the overlap's old one until the takeover, then its new one.
        let side: OverlapDedupe<Message>.Side = fromCurrent != self.dedupe!.tookOver ? .old : .new
        return self.dedupe!.admit(message, bytes: bytes, from: side)
    }

    /// The new connection takes over: what it held (it was ahead of the old), in its order, to
    /// deliver now. The last overlap's tail is over: the connection it watched is the old one.
    package mutating func takeOver() -> [Message] {
        self.endTail()
        return self.dedupe?.takeOver() ?? []
    }

    /// The old connection ended after the takeover: the overlap's dedupe becomes the tail, for
    /// the moment the owner's timer gives it (then `endTail`).
    package mutating func oldEnded() {
        guard let dedupe = self.dedupe else { return }
        self.endTail()
        self.tail = dedupe
        self.dedupe = nil
    }

    /// The renewal failed before its new connection took over: its overlap is over; the last
    /// overlap's tail goes on.
    package mutating func failed() {
        self.droppedBefore += self.dedupe?.dropped ?? 0
        self.dedupe = nil
    }

    /// The last overlap's moment is over.
    package mutating func endTail() {
        self.droppedBefore += self.tail?.dropped ?? 0
        self.tail = nil
    }

    /// The link's connection went: every overlap with it.
    package mutating func end() {
        self.failed()
        self.endTail()
    }
}
