/// What the link has carried, for `status` and the metrics: messages and bytes each way.
struct LinkCounters {
    private(set) var messagesIn: UInt64 = 0
    private(set) var bytesIn: UInt64 = 0
    private(set) var messagesOut: UInt64 = 0
    private(set) var bytesOut: UInt64 = 0

    mutating func received(bytes: Int) {
        self.messagesIn += 1
        self.bytesIn += UInt64(bytes)
    }

    mutating func sent(bytes: Int) {
        self.messagesOut += 1
        self.bytesOut += UInt64(bytes)
    }
}
