import DequeModule

/// One local client's outbound queue: upstream messages, bounded by count and bytes, and control
/// lines (replies and notices), delivered together in the order they were queued.
///
/// When messages exceed the limits, the oldest ones are dropped, each in O(1): messages and
/// control lines live in two deques stamped with a shared arrival order, so dropping the oldest
/// message never has to step over (or rebuild around) the replies queued between messages. The
/// next message after a drop is preceded by one `dropped` notice covering everything lost since
/// the last notice. Control lines are never dropped; the driver bounds them by reading no more
/// requests from a client whose unread control output passes its cap.
///
/// Pure: it holds lines of any type and their sizes; the daemon drives it from its event loop.
public struct SubscriberQueue<Line> {
    public struct Limits: Sendable, Equatable {
        public var messages: Int
        public var bytes: Int

        public init(messages: Int, bytes: Int) {
            self.messages = messages
            self.bytes = bytes
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
        case line(Line)
    }

    /// Order, seq and size of a queued message: kept apart from its line, so looking at the next
    /// entry (and dropping the oldest) touches no reference count. Only moving a line in and out
    /// does, once each.
    @usableFromInline
    struct Meta {
        @usableFromInline var order: UInt64
        @usableFromInline var seq: UInt64
        @usableFromInline var bytes: Int

        @usableFromInline
        init(order: UInt64, seq: UInt64, bytes: Int) {
            self.order = order
            self.seq = seq
            self.bytes = bytes
        }
    }

    @usableFromInline var messageMeta = Deque<Meta>()
    @usableFromInline var messageLines = Deque<Line>()
    @usableFromInline var controlMeta = Deque<Meta>()
    @usableFromInline var controlLines = Deque<Line>()
    @usableFromInline var nextOrder: UInt64 = 0
    @usableFromInline var pendingDrop: Drop?

    public var limits: Limits
    @usableFromInline var _messageBytes = 0
    @usableFromInline var _controlBytes = 0
    /// Bytes of the queued messages.
    @inlinable public var messageBytes: Int { self._messageBytes }
    /// Bytes of the queued replies and notices.
    @inlinable public var controlBytes: Int { self._controlBytes }

    public init(limits: Limits) {
        self.limits = limits
    }

    @inlinable
    public var messageCount: Int { self.messageMeta.count }
    @inlinable
    public var controlCount: Int { self.controlMeta.count }
    @inlinable
    public var isEmpty: Bool { self.messageMeta.isEmpty && self.controlMeta.isEmpty && self.pendingDrop == nil }

    /// Whether one more message of `bytes` would pass a limit (the driver writes out what the
    /// socket takes before it lets the queue drop).
    @inlinable
    public func wouldOverflow(adding bytes: Int) -> Bool {
        self.messageMeta.count + 1 > self.limits.messages || self._messageBytes + bytes > self.limits.bytes
    }

    /// Queues an upstream message. Drops the oldest messages while the queue is over its limits,
    /// but never the newest one: a single message larger than the byte limit still goes out.
    /// Returns how many messages were dropped.
    @inlinable
    @discardableResult
    public mutating func appendMessage(_ line: Line, bytes: Int, seq: UInt64) -> Int {
        self.messageMeta.append(Meta(order: self.nextOrder, seq: seq, bytes: bytes))
        self.messageLines.append(line)
        self.nextOrder &+= 1
        self._messageBytes += bytes
        return self.trimToLimits()
    }

    /// Queues a reply or notice. Never dropped.
    @inlinable
    public mutating func appendControl(_ line: Line, bytes: Int) {
        self.controlMeta.append(Meta(order: self.nextOrder, seq: 0, bytes: bytes))
        self.controlLines.append(line)
        self.nextOrder &+= 1
        self._controlBytes += bytes
    }

    /// Drops the oldest messages until the queue is within its limits (after `limits` shrank,
    /// or a message was added). Returns how many were dropped.
    @inlinable
    @discardableResult
    public mutating func trimToLimits() -> Int {
        var dropped = 0
        while self.messageMeta.count > 1,
            self.messageMeta.count > self.limits.messages || self._messageBytes > self.limits.bytes
        {
            let oldest = self.messageMeta.removeFirst()
            self.messageLines.removeFirst()
            self._messageBytes -= oldest.bytes
            dropped += 1
            if var drop = self.pendingDrop {
                drop.count += 1
                drop.to = oldest.seq
                self.pendingDrop = drop
            } else {
                self.pendingDrop = Drop(count: 1, from: oldest.seq, to: oldest.seq)
            }
        }
        return dropped
    }

    /// The size of what `next()` returns: a line's bytes, 0 for a pending notice, nil when empty.
    @inlinable
    public var nextSize: Int? {
        let message = self.messageMeta.first
        if let control = self.controlMeta.first, message == nil || control.order < message!.order { return control.bytes }
        if self.pendingDrop != nil { return 0 }
        return message?.bytes
    }

    /// The next thing to write, in arrival order. A pending `dropped` notice comes right before
    /// the next message (or last, when no message is left).
    @inlinable
    public mutating func next() -> Output? {
        let message = self.messageMeta.first
        if let control = self.controlMeta.first, message == nil || control.order < message!.order {
            self.controlMeta.removeFirst()
            self._controlBytes -= control.bytes
            return .line(self.controlLines.removeFirst())
        }
        if let drop = self.pendingDrop {
            self.pendingDrop = nil
            return .dropped(drop)
        }
        guard let message else { return nil }
        self.messageMeta.removeFirst()
        self._messageBytes -= message.bytes
        return .line(self.messageLines.removeFirst())
    }

    /// Takes the messages that come next, oldest first, as long as no reply, notice or `dropped`
    /// notice comes before them and their bytes stay within `maxBytes`: `body` gets each line,
    /// the queue drops them all at once. Returns how many. The fast path of a subscriber's
    /// writes: no per-message comparison with the control lines.
    @inlinable
    @discardableResult
    public mutating func takeMessages(maxBytes: Int, _ body: (Line) -> Void) -> Int {
        guard self.pendingDrop == nil else { return 0 }
        let before = self.controlMeta.first?.order ?? .max
        var count = 0
        var bytes = 0
        for meta in self.messageMeta {
            guard meta.order < before, bytes + meta.bytes <= maxBytes else { break }
            count += 1
            bytes += meta.bytes
        }
        guard count > 0 else { return 0 }
        for i in 0..<count { body(self.messageLines[i]) }
        self.messageMeta.removeFirst(count)
        self.messageLines.removeFirst(count)
        self._messageBytes -= bytes
        return count
    }

    /// Forgets everything queued (the client is gone).
    @inlinable
    public mutating func removeAll() {
        self.messageMeta.removeAll()
        self.messageLines.removeAll()
        self.controlMeta.removeAll()
        self.controlLines.removeAll()
        self.pendingDrop = nil
        self._messageBytes = 0
        self._controlBytes = 0
    }
}

extension SubscriberQueue.Output: Equatable where Line: Equatable {}
