import NIOCore

/// A client's replies in the order of its requests. A reply that comes later (a send waiting
/// for the spool) holds its place with a ticket, and every reply after it waits behind it; a
/// filled ticket releases what no longer waits. What waits counts against the client's output
/// bound: its bytes, and `slotBytes` for each unfilled ticket.
struct ReplyOrder {
    /// A place in the order, filled later with `fill`.
    struct Ticket: Equatable {
        fileprivate var number: Int
    }

    private var held = CircularBuffer<ByteBuffer?>()
    /// The ticket number of `held.first`.
    private var base = 0
    /// The bytes waiting: lines held behind a ticket, and `slotBytes` per unfilled ticket.
    private(set) var bytes = 0
    /// What an unfilled ticket counts against `local.client_output_bytes`.
    static let slotBytes = 64

    var isEmpty: Bool { self.held.isEmpty }

    /// A reply ready now: returned to go out at once, or nil when it waits behind a ticket.
    mutating func add(_ line: ByteBuffer) -> ByteBuffer? {
        guard !self.held.isEmpty else { return line }
        self.held.append(line)
        self.bytes += line.readableBytes
        return nil
    }

    /// Reserves the place of a reply that comes later.
    mutating func hold() -> Ticket {
        self.held.append(nil)
        self.bytes += Self.slotBytes
        return Ticket(number: self.base + self.held.count - 1)
    }

    /// Puts a reply in its place; returns the replies that no longer wait, in order. A ticket
    /// already filled, or from before `removeAll`, is ignored.
    mutating func fill(_ ticket: Ticket, with line: ByteBuffer) -> [ByteBuffer] {
        let offset = ticket.number - self.base
        guard offset >= 0, offset < self.held.count else { return [] }
        let index = self.held.index(self.held.startIndex, offsetBy: offset)
        guard self.held[index] == nil else { return [] }
        self.held[index] = line
        self.bytes += line.readableBytes - Self.slotBytes
        var ready: [ByteBuffer] = []
        while let first = self.held.first, let line = first {
            self.held.removeFirst()
            self.base += 1
            self.bytes -= line.readableBytes
            ready.append(line)
        }
        return ready
    }

    /// Forgets every waiting reply (the client is gone).
    mutating func removeAll() {
        self.base += self.held.count
        self.held.removeAll()
        self.bytes = 0
    }
}
