/// After an open, the subscriptions that never worked go one at a time, each once the one before
/// it was confirmed (the server answered it or sent its events) or its wait timed out
/// (`protocol.confirm_timeout`: a protocol whose subscribe has no answer, a quiet subject), so
/// that a close right after one of them is laid at that one and no other (issue 44, item 6). New
/// subscriptions made meanwhile wait their turn behind them. Those that worked before go at once,
/// ahead of these (the session's `ready`).
struct AppProtocolRestore {
    /// The upstream ids still to send, in order.
    private var waiting: [WireID] = []
    private var next = 0
    /// The one sent and not yet confirmed (nil: no restore under way).
    private(set) var confirming: WireID?
    /// Bumped whenever one is sent: a timer armed for an earlier one is stale.
    private(set) var step = 0

    var isActive: Bool { self.confirming != nil }

    /// A restore of `ids` begins (whatever one was under way ends).
    mutating func start(_ ids: [WireID]) {
        self.waiting = ids
        self.next = 0
        self.confirming = nil
    }

    /// A new subscription while one is under way: it goes after the others.
    mutating func enqueue(_ id: WireID) { self.waiting.append(id) }

    /// The next id to send (it becomes the one confirming), or nil when none is left.
    mutating func advance() -> WireID? {
        guard self.next < self.waiting.count else {
            self.reset()
            return nil
        }
        let id = self.waiting[self.next]
        self.next += 1
        self.confirming = id
        self.step &+= 1
        return id
    }

    /// The connection ended: nothing is under way.
    mutating func reset() {
        self.waiting = []
        self.next = 0
        self.confirming = nil
    }
}
