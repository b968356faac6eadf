import DequeModule

/// What a subscriber's queue holds: one line, or several message lines one after another (the
/// lines of one fan-out flush, in one buffer). A run is queued, dropped from and taken from by
/// the line, without being taken apart: queueing the lines of a read costs the same for 1 line
/// as for 1,000.
public protocol QueuedLines {
    /// How many lines (at least 1).
    var lineCount: Int { get }
    /// The bytes before line `i`: 0 for the first, the run's size for `lineCount`.
    func lineStart(_ i: Int) -> Int
}

/// One local client's outbound queue: upstream messages, bounded by count and bytes, and control
/// lines (replies and notices), delivered together in the order they were queued.
///
/// Messages come in runs (`QueuedLines`) whose lines have consecutive sequence numbers. When
/// messages exceed the limits, the oldest lines are dropped, a run's first lines at a time, in
/// O(log n) per run touched: messages and control lines live in two deques stamped with a shared
/// arrival order, so dropping the oldest message never has to step over (or rebuild around) the
/// replies queued between messages. The next message after a drop is preceded by one `dropped`
/// notice covering everything lost since the last notice. Control lines are never dropped; the
/// driver bounds them by reading no more requests from a client whose unread control output
/// passes its cap.
///
/// Pure: it holds runs of any type; the daemon drives it from its event loop.
public struct SubscriberQueue<Lines: QueuedLines> {
    public struct Limits: Sendable, Equatable {
        public var messages: Int
        public var bytes: Int
        /// Lines younger than this (nanoseconds, by the `now` the driver gives) are kept past
        /// `messages`, up to `burstMessages` and never past `bytes`: a burst the reader takes
        /// within it is not lost, while a reader behind for longer keeps `messages` lines.
        /// 0: `messages` always bounds.
        public var burstNanoseconds: UInt64
        /// The most lines a burst keeps (at least `messages`): each queued run costs its entry
        /// whatever its size, so the count bounds the entries when runs are small.
        public var burstMessages: Int

        public init(messages: Int, bytes: Int, burstNanoseconds: UInt64 = 0, burstMessages: Int? = nil) {
            self.messages = messages
            self.bytes = bytes
            self.burstNanoseconds = burstNanoseconds
            self.burstMessages = max(messages, burstMessages ?? messages)
        }
    }

    /// Messages lost since the last notice: how many, and the first and last sequence number.
    public struct Drop: Sendable, Equatable {
        public var count: UInt64
        public var from: UInt64
        public var to: UInt64

        public init(count: UInt64, from: UInt64, to: UInt64) {
            self.count = count
            self.from = from
            self.to = to
        }
    }

    /// What to write next.
    public enum Output {
        /// Write a `dropped` notice for these messages.
        case dropped(Drop)
        /// A reply or notice, whole.
        case control(Lines)
        /// These lines of a run (the bytes from `lineStart(range.lowerBound)` to
        /// `lineStart(range.upperBound)`).
        case messages(Lines, Range<Int>)
    }

    /// Order, first seq, the lines still queued and their size, and when it came, of a queued
    /// run: kept apart from the run itself, so looking at the next entry (and dropping the oldest
    /// lines) touches no reference count. Only moving a run in and out does, once each.
    @usableFromInline
    struct Meta {
        @usableFromInline var order: UInt64
        /// The seq of the run's line 0 (line `i` has `seq + i`).
        @usableFromInline var seq: UInt64
        /// The first line still queued, and the end of the run.
        @usableFromInline var first: Int
        @usableFromInline var end: Int
        /// The bytes of the lines still queued.
        @usableFromInline var bytes: Int
        /// When the run came: the driver's `now` (nanoseconds), for the burst.
        @usableFromInline var at: UInt64

        @usableFromInline
        init(order: UInt64, seq: UInt64, first: Int, end: Int, bytes: Int, at: UInt64) {
            self.order = order
            self.seq = seq
            self.first = first
            self.end = end
            self.bytes = bytes
            self.at = at
        }
    }

    @usableFromInline var messageMeta = Deque<Meta>()
    @usableFromInline var messageLines = Deque<Lines>()
    /// A queued reply's or notice's place in the arrival order, and its size.
    @usableFromInline
    struct Control {
        @usableFromInline var order: UInt64
        @usableFromInline var bytes: Int

        @usableFromInline
        init(order: UInt64, bytes: Int) {
            self.order = order
            self.bytes = bytes
        }
    }

    @usableFromInline var controlMeta = Deque<Control>()
    @usableFromInline var controlLines = Deque<Lines>()
    @usableFromInline var nextOrder: UInt64 = 0
    @usableFromInline var pendingDrop: Drop?
    /// The most runs (and control lines) queued since the deques last had their storage freed:
    /// a queue that emptied after it held more than `keptEntries` lets its storage go, so a
    /// hundred subscribers that lagged once do not keep a lag's worth of deque each.
    @usableFromInline var peakEntries = 0
    /// Entries whose storage an empty queue keeps (a reader keeping up holds a few).
    @usableFromInline static var keptEntries: Int { 64 }

    public var limits: Limits
    @usableFromInline var _messageCount = 0
    @usableFromInline var _messageBytes = 0
    @usableFromInline var _controlBytes = 0
    /// Bytes of the queued messages.
    @inlinable public var messageBytes: Int { self._messageBytes }
    /// Bytes of the queued replies and notices.
    @inlinable public var controlBytes: Int { self._controlBytes }

    public init(limits: Limits) {
        self.limits = limits
    }

    /// The queued message lines.
    @inlinable
    public var messageCount: Int { self._messageCount }
    @inlinable
    public var controlCount: Int { self.controlMeta.count }
    @inlinable
    public var isEmpty: Bool { self.messageMeta.isEmpty && self.controlMeta.isEmpty && self.pendingDrop == nil }

    /// Whether `lines` more message lines of `bytes` would pass a limit at `now` (the driver
    /// writes out what the socket takes before it lets the queue drop).
    @inlinable
    public func wouldOverflow(adding lines: Int, bytes: Int, now: UInt64 = 0) -> Bool {
        self._messageBytes + bytes > self.limits.bytes
            || (self._messageCount + lines > self.limits.messages
                && (self._messageCount + lines > self.limits.burstMessages || !self.headIsBurst(now)))
    }

    /// Whether the oldest queued run came within `limits.burstNanoseconds` before `now` (then so
    /// did every other): the count does not bound it.
    @inlinable
    func headIsBurst(_ now: UInt64) -> Bool {
        guard self.limits.burstNanoseconds > 0, let head = self.messageMeta.first else { return false }
        return now < head.at &+ self.limits.burstNanoseconds
    }

    /// Queues a run of upstream message lines, line 0 numbered `seq`, come at `now`
    /// (nanoseconds, for `limits.burstNanoseconds`). Drops the oldest lines while the queue is
    /// over its limits, but never the newest one: a single message larger than the byte limit
    /// still goes out. Returns how many lines were dropped.
    @inlinable
    @discardableResult
    public mutating func appendMessages(_ lines: Lines, seq: UInt64, now: UInt64 = 0) -> Int {
        let count = lines.lineCount
        let bytes = lines.lineStart(count)
        self.messageMeta.append(Meta(order: self.nextOrder, seq: seq, first: 0, end: count, bytes: bytes, at: now))
        self.messageLines.append(lines)
        self.peakEntries = max(self.peakEntries, self.messageMeta.count &+ self.controlMeta.count)
        self.nextOrder &+= 1
        self._messageCount += count
        self._messageBytes += bytes
        return self.trimToLimits(now: now)
    }

    /// Queues a reply or notice, whole. Never dropped.
    @inlinable
    public mutating func appendControl(_ line: Lines) {
        let bytes = line.lineStart(line.lineCount)
        self.controlMeta.append(Control(order: self.nextOrder, bytes: bytes))
        self.controlLines.append(line)
        self.peakEntries = max(self.peakEntries, self.messageMeta.count &+ self.controlMeta.count)
        self.nextOrder &+= 1
        self._controlBytes += bytes
    }

    /// Drops the oldest message lines until the queue is within its limits at `now` (after
    /// `limits` shrank, or messages were added): past `limits.bytes`, past `limits.messages`
    /// those older than the burst, and past `limits.burstMessages` the oldest of the burst.
    /// Returns how many were dropped.
    @inlinable
    @discardableResult
    public mutating func trimToLimits(now: UInt64 = 0) -> Int {
        var dropped = 0
        while self._messageCount > 1 {
            // The fewest of this run's first lines that bring both counts within the limits,
            // never the newest line of all; a run of the burst is not over the count.
            var overCount = self._messageCount - self.limits.messages
            if overCount > 0, self.headIsBurst(now) { overCount = self._messageCount - self.limits.burstMessages }
            let overBytes = self._messageBytes - self.limits.bytes
            guard overCount > 0 || overBytes > 0 else { break }
            let meta = self.messageMeta[0]
            let lines = self.messageLines[0]
            let base = lines.lineStart(meta.first)
            let reaching = overBytes > 0 ? Self.lines(lines, from: meta.first, end: meta.end, within: overBytes - 1, base: base) + 1 : 0
            let k = min(max(reaching, overCount), meta.end - meta.first, self._messageCount - 1)
            let bytes = lines.lineStart(meta.first + k) - base
            self.dropLines(k, bytes: bytes, seq: meta.seq + UInt64(meta.first))
            dropped += k
        }
        return dropped
    }

    /// How many of `lines`' lines from `first` (at most to `end`) fit in `bytes` bytes: a binary
    /// search of the line starts. (One more than fit in `b - 1` is the fewest that reach `b`.)
    @inlinable
    static func lines(_ lines: Lines, from first: Int, end: Int, within bytes: Int, base: Int) -> Int {
        var lo = first
        var hi = end
        while lo < hi {
            let mid = (lo + hi + 1) / 2
            if lines.lineStart(mid) - base <= bytes { lo = mid } else { hi = mid - 1 }
        }
        return lo - first
    }

    /// Drops the first run's first `k` lines (`bytes` of them, the first numbered `seq`), into
    /// the pending `dropped` notice.
    @inlinable
    mutating func dropLines(_ k: Int, bytes: Int, seq: UInt64) {
        guard k > 0 else { return }
        let last = seq + UInt64(k) - 1
        if var drop = self.pendingDrop {
            drop.count += UInt64(k)
            drop.to = last
            self.pendingDrop = drop
        } else {
            self.pendingDrop = Drop(count: UInt64(k), from: seq, to: last)
        }
        self.removeFirstLines(k, bytes: bytes)
    }

    /// Takes the first run's first `k` lines (`bytes` of them) off the queue.
    @inlinable
    mutating func removeFirstLines(_ k: Int, bytes: Int) {
        self._messageCount -= k
        self._messageBytes -= bytes
        if self.messageMeta[0].first + k == self.messageMeta[0].end {
            self.messageMeta.removeFirst()
            self.messageLines.removeFirst()
            if self.messageMeta.isEmpty { self.releaseStorageIfDrained() }
        } else {
            self.messageMeta[0].first += k
            self.messageMeta[0].bytes -= bytes
        }
    }

    /// Whether a reply or notice comes before the next message.
    @inlinable
    public var controlComesFirst: Bool {
        guard let control = self.controlMeta.first else { return false }
        guard let message = self.messageMeta.first else { return true }
        return control.order < message.order
    }

    /// The next thing to write, in arrival order: a reply or notice, a pending `dropped` notice
    /// (right before the next message, or last when no message is left), or the next message
    /// lines of one run, as many whole lines as fit in `maxBytes` (at least one).
    @inlinable
    public mutating func next(maxBytes: Int = .max) -> Output? {
        if self.controlComesFirst {
            let control = self.controlMeta.removeFirst()
            self._controlBytes -= control.bytes
            let line = self.controlLines.removeFirst()
            if self.controlMeta.isEmpty { self.releaseStorageIfDrained() }
            return .control(line)
        }
        if let drop = self.pendingDrop {
            self.pendingDrop = nil
            return .dropped(drop)
        }
        guard let meta = self.messageMeta.first else { return nil }
        let lines = self.messageLines[0]
        let base = lines.lineStart(meta.first)
        let k = max(1, Self.lines(lines, from: meta.first, end: meta.end, within: maxBytes, base: base))
        self.removeFirstLines(k, bytes: lines.lineStart(meta.first + k) - base)
        return .messages(lines, meta.first..<(meta.first + k))
    }

    /// Takes the message lines that come next, oldest first, as long as no reply, notice or
    /// `dropped` notice comes before them and their bytes stay within `maxBytes`: `body` gets
    /// each run's part (whole lines only). Returns how many lines. The fast path of a
    /// subscriber's writes: no per-line work.
    @inlinable
    @discardableResult
    public mutating func takeMessages(maxBytes: Int, _ body: (Lines, Range<Int>) -> Void) -> Int {
        guard self.pendingDrop == nil else { return 0 }
        let before = self.controlMeta.first?.order ?? .max
        var room = maxBytes
        var taken = 0
        while let meta = self.messageMeta.first, meta.order < before, room > 0 {
            let lines = self.messageLines[0]
            let base = lines.lineStart(meta.first)
            let k = meta.bytes <= room ? meta.end - meta.first : Self.lines(lines, from: meta.first, end: meta.end, within: room, base: base)
            guard k > 0 else { break }
            let bytes = lines.lineStart(meta.first + k) - base
            self.removeFirstLines(k, bytes: bytes)
            body(lines, meta.first..<(meta.first + k))
            room -= bytes
            taken += k
        }
        return taken
    }

    /// Frees the deques' storage once the queue is empty after it held more than `keptEntries`
    /// (a deque keeps its capacity when emptied): what a lag grew goes back when the lag ends.
    @inlinable
    mutating func releaseStorageIfDrained() {
        guard self.peakEntries > Self.keptEntries, self.messageMeta.isEmpty, self.controlMeta.isEmpty else { return }
        self.messageMeta = Deque()
        self.messageLines = Deque()
        self.controlMeta = Deque()
        self.controlLines = Deque()
        self.peakEntries = 0
    }

    /// The most entries (runs and control lines) queued at once since the storage was last
    /// freed: 0 after a queue that held more than `keptEntries` drained.
    public var entriesSinceRelease: Int { self.peakEntries }

    /// Forgets everything queued (the client is gone).
    @inlinable
    public mutating func removeAll() {
        self.messageMeta.removeAll()
        self.messageLines.removeAll()
        self.controlMeta.removeAll()
        self.controlLines.removeAll()
        self.pendingDrop = nil
        self._messageCount = 0
        self._messageBytes = 0
        self._controlBytes = 0
    }
}

extension SubscriberQueue.Output: Equatable where Lines: Equatable {}
