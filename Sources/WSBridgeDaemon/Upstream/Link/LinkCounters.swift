/// What the link has carried, for `status` and the metrics: messages and bytes each way.
final class LinkCounters {
    private(set) var messagesIn: UInt64 = 0
    private(set) var bytesIn: UInt64 = 0
    private(set) var messagesOut: UInt64 = 0
    private(set) var bytesOut: UInt64 = 0

    func received(bytes: Int) {
        self.messagesIn += 1
        self.bytesIn += UInt64(bytes)
    }

    func sent(bytes: Int) {
        self.messagesOut += 1
        self.bytesOut += UInt64(bytes)
    }
}
