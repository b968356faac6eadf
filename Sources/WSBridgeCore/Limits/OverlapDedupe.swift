import DequeModule
import WSBridgeProtocol

/// A renewal's overlap: two connections to the same feed, their messages delivered once each and
/// in the order of one connection at a time.
///
/// A message is known by the values at `upstream.dedupe`'s paths (Binance's stream and update
/// id: `["stream", "data.u"]`), else, when it has none of them or no paths are set, by its bytes.
/// Until the new connection takes over, the old one's messages are delivered; the new one's are
/// matched against them (the same: dropped) or, when it is ahead, held. At the takeover the held
/// ones are delivered, in their order, and from then on the new connection's are; the old one's
/// still arriving are dropped when they are events of a stream (the new connection has them),
/// and delivered when they are not (an answer to a request sent on it). The two are matched one to
/// one, so a message that really comes twice on one connection is delivered twice. Each side
/// remembers at most `window` messages (the oldest forgotten first), and at most `window` wait.
///
/// It tells when the new connection has caught up: for every stream (the first path's value; with
/// fewer than two paths, the feed as a whole) the old one delivered during the overlap, one of the
/// new one's messages was the same as one of the old's. From that message on the new one has the
/// stream, and before it the old one delivered it: nothing falls between them, even when the old
/// one lags (a later message on the new one alone proves nothing: the old may still bring the ones
/// before it). Pure: no clock, no I/O.
package struct OverlapDedupe<Message> {
    package enum Side: Int {
        case old = 0
        case new = 1
    }

    private let paths: [[JSONValue.PathComponent]]
    /// The same, made ready for scans.
    private let scanPaths: [JSONPathScan.Path]
    private let window: Int
    /// Per side: the keys it delivered that the other has not matched yet, with their counts,
    /// and their order (to forget the oldest).
    private var pending: [[Key: Int]] = [[:], [:]]
    private var order: [Deque<Key>] = [Deque(), Deque()]
    /// The new connection's messages waiting for the takeover (it was ahead of the old), and
    /// those of them the old one delivered meanwhile (not to be delivered again).
    private var held: Deque<(key: Key, message: Message)> = []
    private var heldKeys: [Key: Int] = [:]
    private var cancelled: [Key: Int] = [:]
    /// Streams the old connection delivered during the overlap, and those whose messages the two
    /// connections had in common (from there on the new one has every one of them).
    /// Kept by their hashes (a value's size is the feed's to choose), at most `window` of each;
    /// the names of the first few, for `behind`.
    private var oldStreams: Set<Int> = []
    private var newStreams: Set<Int> = []
    private var names: [Int: String] = [:]
    private var matched = false
    /// The new connection took over.
    package private(set) var tookOver = false
    /// Messages dropped as the other connection's duplicates.
    package private(set) var dropped = 0

    private struct Key: Hashable {
        var hash: Int
        var length: Int
    }

    /// A message's stream: the hash of its text, and the text (a name for `behind`), as the
    /// message's bytes have it while `admit` runs, or as a parse wrote it.
    private struct Stream {
        let hash: Int
        let span: UnsafeRawBufferPointer?
        let written: String?

        init(_ span: UnsafeRawBufferPointer) {
            var hasher = Hasher()
            hasher.combine(bytes: span)
            self.hash = hasher.finalize()
            (self.span, self.written) = (span, nil)
        }

        init(_ written: String) {
            var utf8 = written
            var hasher = Hasher()
            utf8.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
            self.hash = hasher.finalize()
            (self.span, self.written) = (nil, written)
        }

        var name: String { self.written ?? self.span.map { String(decoding: $0.prefix(200), as: UTF8.self) } ?? "" }
    }

    package init(paths: [String], window: Int) {
        self.paths = paths.map { JSONValue.PathComponent.split($0) }
        self.scanPaths = self.paths.map(JSONPathScan.Path.init)
        self.window = max(1, window)
    }

    /// `message` (its `bytes`) from `side`, when it is delivered now (nil: a duplicate, or held
    /// for the takeover).
    package mutating func admit(_ message: Message, bytes: UnsafeRawBufferPointer, from side: Side) -> Message? {
        let (key, stream) = self.key(bytes)
        if side == .old {
            return self.fromOld(message, key, stream)
        }
        if self.take(key, from: Side.old.rawValue) {
            if let stream { self.note(stream, on: .new) }
            self.matched = true
            self.dropped += 1
            return nil
        }
        guard self.tookOver else {
            self.held.append((key, message))
            self.heldKeys[key, default: 0] += 1
            return nil
        }
        self.remember(key, Side.new.rawValue)
        return message
    }

    private mutating func fromOld(_ message: Message, _ key: Key, _ stream: Stream?) -> Message? {
        if self.tookOver {
            // An event of a stream: the new connection has it, or will.
            if stream != nil && !self.paths.isEmpty || self.take(key, from: Side.new.rawValue) {
                self.dropped += 1
                return nil
            }
            return message
        }
        if let stream { self.note(stream, on: .old) }
        if let count = self.heldKeys[key] {
            // The new connection brought it first and holds it: delivered now, from here.
            self.heldKeys[key] = count == 1 ? nil : count - 1
            self.cancelled[key, default: 0] += 1
            if let stream { self.note(stream, on: .new) }
            self.matched = true
            self.dropped += 1
            return message
        }
        self.remember(key, Side.old.rawValue)
        return message
    }

    /// The new connection takes over: what it held, in its order, to deliver now.
    package mutating func takeOver() -> [Message] {
        self.tookOver = true
        var out: [Message] = []
        out.reserveCapacity(self.held.count)
        while let (key, message) = self.held.popFirst() {
            if let count = self.cancelled[key] {
                self.cancelled[key] = count == 1 ? nil : count - 1
                continue
            }
            self.remember(key, Side.new.rawValue)
            out.append(message)
        }
        self.heldKeys = [:]
        self.cancelled = [:]
        return out
    }

    /// The new connection has caught up with the old (see the type's notes).
    package var caughtUp: Bool { self.matched && self.oldStreams.isSubset(of: self.newStreams) }

    /// The new connection holds `window` messages: it must take over (the old one lags).
    package var isFull: Bool { self.held.count >= self.window }

    /// The streams the old connection delivered that the two have no message of in common yet (at most `limit`).
    package func behind(limit: Int = 5) -> [String] {
        let missing = self.oldStreams.subtracting(self.newStreams)
        return Array(missing.map { self.names[$0] ?? "#\($0)" }.sorted().prefix(limit))
    }

    /// Stream `stream` seen on `side` (delivered by the old, or in common for the new).
    private mutating func note(_ stream: Stream, on side: Side) {
        let hash = stream.hash
        // Inserted in place (a set bound to a local first would be copied by the insert).
        switch side {
        case .old:
            guard self.oldStreams.count < self.window, self.oldStreams.insert(hash).inserted else { return }
        case .new:
            guard self.newStreams.count < self.window, self.newStreams.insert(hash).inserted else { return }
        }
        if self.names.count < 64, self.names[hash] == nil { self.names[hash] = stream.name }
    }

    /// Takes one of `side`'s pending `key`; false when there is none.
    private mutating func take(_ key: Key, from side: Int) -> Bool {
        guard let count = self.pending[side][key] else { return false }
        self.pending[side][key] = count == 1 ? nil : count - 1
        return true
    }

    private mutating func remember(_ key: Key, _ side: Int) {
        self.pending[side][key, default: 0] += 1
        self.order[side].append(key)
        guard self.order[side].count > self.window else { return }
        // Keys matched already are gone from `pending` but still in `order`: skip them.
        while let oldest = self.order[side].popFirst() {
            if self.take(oldest, from: side) { return }
        }
    }

    /// The message's key and stream: from the paths when they are set and the message has them,
    /// else from its bytes (its stream: the feed's, "", when no paths are set; none when the
    /// paths are set and the message lacks them, an answer or a notice).
    private func key(_ bytes: UnsafeRawBufferPointer) -> (Key, Stream?) {
        // The paths' values found by a scan (nothing built), when it can tell; else parsed.
        if !self.paths.isEmpty, let scanned = self.scannedKey(bytes) { return scanned }
        var hasher = Hasher()
        if !self.paths.isEmpty, let json = try? JSONValue.parse(bytes) {
            let values = self.paths.map { json.value(at: $0) }
            if values.allSatisfy({ $0 != nil }) {
                var length = 0
                for value in values {
                    let text = value?.serialized ?? ""
                    var utf8 = text
                    utf8.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
                    hasher.combine(0xFF as UInt8)
                    length += text.utf8.count
                }
                let stream = self.paths.count > 1 ? values[0]?.serialized ?? "" : ""
                return (Key(hash: hasher.finalize(), length: length), Stream(stream))
            }
        }
        hasher.combine(bytes: bytes)
        return (Key(hash: hasher.finalize(), length: bytes.count), self.paths.isEmpty ? Stream("") : nil)
    }

    /// The key and stream from the paths' values as the message's bytes have them; a message
    /// that lacks one is known by its bytes, with no stream; nil when the scan cannot tell (a
    /// parse decides).
    private func scannedKey(_ bytes: UnsafeRawBufferPointer) -> (Key, Stream?)? {
        var hasher = Hasher()
        var length = 0
        var stream = Stream(UnsafeRawBufferPointer(rebasing: bytes[0..<0]))
        for (n, path) in self.scanPaths.enumerated() {
            switch JSONPathScan.scan(path, in: bytes) {
            case .unsure:
                return nil
            case .missing:
                var whole = Hasher()
                whole.combine(bytes: bytes)
                return (Key(hash: whole.finalize(), length: bytes.count), nil)
            case .found(let range):
                let value = UnsafeRawBufferPointer(rebasing: bytes[range])
                hasher.combine(bytes: value)
                hasher.combine(0xFF as UInt8)  // no byte of JSON text: the values stay apart
                length += value.count
                if n == 0 && self.paths.count > 1 { stream = Stream(value) }
            }
        }
        return (Key(hash: hasher.finalize(), length: length), stream)
    }
}
