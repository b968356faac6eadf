/// The calls waiting for their answers, by the id the session sent them upstream as.
///
/// Those ids are the session's numbers (`AppProtocolSession.allocate`), given out one after
/// another, and answers come back in about that order: a call is kept in a window of slots by
/// its number, found by a subtraction and removed by clearing its slot, without hashing its id
/// (issue 46: a Socket.IO ack, a JSON-RPC result; a scanned answer's id is read as its number
/// from its bytes, `call(scanned:plain:)`). A call whose number falls outside the window (a
/// renewal's session numbers from another range; one left unanswered while `window` newer ones
/// came) is kept by its id in a dictionary, so the slots stay bounded by `window` whatever
/// the numbers.
struct AppProtocolCallTable {
    typealias Call = AppProtocolSessionCall

    /// The slots (nil: answered, or never given) from `start` on, the first one's number `base`.
    /// (An array read in place: a ring's subscript would copy each slot it is asked about.)
    private var storage: [Call?] = []
    private var start = 0
    private var base: UInt64 = 0
    /// The form of the slots' ids, all one (a codec writes its numbers one way): strings
    /// (`"12"`) or numbers (`12`); nil until the first call. A call in the other form is kept in
    /// `others`.
    private var quoted: Bool?
    /// Calls outside the slots.
    private var others: [WireID: Call] = [:]
    private(set) var count = 0

    /// How many slots at most: a call older than that by number moves to `others`.
    static let window = 4096

    var isEmpty: Bool { self.count == 0 }
    /// The slots in use (the window's width now), for the tests.
    var slotCount: Int { self.storage.count - self.start }

    /// The call sent upstream as `upstream`.
    func call(_ upstream: WireID) -> Call? {
        guard self.count > 0 else { return nil }
        if let slot = self.slot(Self.number(upstream)), let call = self.storage[slot], call.upstream == upstream { return call }
        return self.others.isEmpty ? nil : self.others[upstream]
    }

    /// The call whose upstream id an answer carries as `text` (its bytes; `plain`: a text
    /// protocol's value, a string unquoted, else the id's JSON text), found in the slots only: nil
    /// when no slot holds it (the caller reads the id and asks `call(_:)`).
    func call(scanned text: UnsafeRawBufferPointer, plain: Bool) -> Call? {
        self.slot(scanned: text, plain: plain).flatMap { self.storage[$0] }
    }

    /// As `call(scanned:plain:)`, and the call is removed.
    mutating func remove(scanned text: UnsafeRawBufferPointer, plain: Bool) -> Call? {
        guard let slot = self.slot(scanned: text, plain: plain) else { return nil }
        return self.remove(at: slot)
    }

    /// The slot of the call whose upstream id an answer carries as `text`.
    private func slot(scanned text: UnsafeRawBufferPointer, plain: Bool) -> Int? {
        guard self.count > 0, let (n, quoted) = Self.number(text, plain: plain), let slot = self.slot(n) else { return nil }
        // A slot's id is its number's canonical text, as the scanned one is: it is the call's
        // when its form (a string or a number) is the same.
        guard quoted == self.quoted, case .some = self.storage[slot] else { return nil }
        return slot
    }

    private mutating func remove(at slot: Int) -> Call? {
        let call = self.storage[slot].take()
        self.count -= 1
        if slot == self.start { self.trim() }
        return call
    }

    mutating func insert(_ call: Call) {
        self.count += 1
        guard let n = Self.number(call.upstream), (self.quoted ?? call.quoted) == call.quoted else {
            self.others[call.upstream] = call
            return
        }
        self.quoted = call.quoted
        let new: Call? = call
        if self.slotCount == 0 {
            self.storage.removeAll(keepingCapacity: true)
            self.start = 0
            self.base = n
        }
        if n >= self.base, n - self.base < UInt64(Self.window) {
            let slot = self.start + Int(n - self.base)
            if slot < self.storage.count {
                if let old = self.storage[slot] { self.others[old.upstream] = old }
                self.storage[slot] = new
                return
            }
            if slot > self.storage.count { self.storage.append(contentsOf: repeatElement(nil, count: slot - self.storage.count)) }
            self.storage.append(new)
            return
        }
        if n >= self.base, n - self.base < UInt64(2 * Self.window) {
            // Newer than the window by less than its width: the window moves on to hold it, its
            // oldest calls moving to `others`.
            let slot = self.start + Int(n - self.base)
            if slot > self.storage.count { self.storage.append(contentsOf: repeatElement(nil, count: slot - self.storage.count)) }
            self.storage.append(new)
            while self.slotCount > Self.window {
                if let old = self.storage[self.start].take() { self.others[old.upstream] = old }
                self.start += 1
                self.base += 1
            }
            self.trim()
            return
        }
        self.others[call.upstream] = call
    }

    /// Removes the call sent as `upstream`; returns it.
    mutating func remove(_ upstream: WireID) -> Call? {
        guard self.count > 0 else { return nil }
        if let slot = self.slot(Self.number(upstream)), self.storage[slot]?.upstream == upstream { return self.remove(at: slot) }
        guard !self.others.isEmpty, let call = self.others.removeValue(forKey: upstream) else { return nil }
        self.count -= 1
        return call
    }

    /// Every call, the slots' in their order, then the others'.
    var all: [Call] { self.storage[self.start...].compactMap { $0 } + self.others.values }

    mutating func removeAll() {
        self.storage.removeAll()
        self.start = 0
        self.others.removeAll()
        self.count = 0
    }

    /// The slot (in `storage`) of number `n`, if the window has it.
    private func slot(_ n: UInt64?) -> Int? {
        guard let n, n >= self.base, n - self.base < UInt64(self.slotCount) else { return nil }
        return self.start + Int(n - self.base)
    }

    /// Drops the answered slots at the window's start.
    private mutating func trim() {
        while self.start < self.storage.count, case .none = self.storage[self.start] {
            self.start += 1
            self.base += 1
        }
        // The slots before `start` are dropped once they are as many as a window (at most two
        // windows' worth are kept).
        if self.start >= Self.window || self.start == self.storage.count {
            self.storage.removeFirst(self.start)
            self.start = 0
        }
    }

    /// The number an id of the session's is (`"12"` or `12`); nil for any other id.
    static func number(_ id: WireID) -> UInt64? {
        var key = id.key
        return key.withUTF8 { Self.number(UnsafeRawBufferPointer($0), plain: false)?.n }
    }

    /// The number whose canonical decimal text (no sign, no leading zero, at most 19 digits) is
    /// `text`, quoted or not (`plain`: a text protocol's value, read as a string).
    static func number(_ text: UnsafeRawBufferPointer, plain: Bool) -> (n: UInt64, quoted: Bool)? {
        guard var p = text.baseAddress?.assumingMemoryBound(to: UInt8.self), !text.isEmpty else { return nil }
        var end = p + text.count
        var quoted = plain
        if !plain, p.pointee == UInt8(ascii: "\"") {
            guard text.count >= 2, (end - 1).pointee == UInt8(ascii: "\"") else { return nil }
            p += 1
            end -= 1
            quoted = true
        }
        let count = end - p
        guard count > 0, count <= 19, p.pointee != UInt8(ascii: "0") || count == 1 else { return nil }
        var n: UInt64 = 0
        while p < end {
            let digit = p.pointee &- UInt8(ascii: "0")
            guard digit < 10 else { return nil }
            n = n &* 10 &+ UInt64(digit)
            p += 1
        }
        return (n, quoted)
    }
}
