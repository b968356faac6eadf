import NIOCore
import Testing

@testable import WSBridgeDaemon

/// The bounded queue of sends made while the link is down.
@Suite struct OutboundQueueTests {
    static func message(_ text: String) -> OutboundMessage {
        OutboundMessage(kind: .text, data: ByteBuffer(string: text))
    }

    static func texts(_ q: inout OutboundQueue) -> [String] {
        var out: [String] = []
        while let e = q.removeFirst() { out.append(String(buffer: e.message.data)) }
        return out
    }

    @Test func boundsByMessagesAndBytesNameTheSettingToRaise() {
        var q = OutboundQueue(maxMessages: 2, maxBytes: 10)
        #expect(throws: Never.self) { try q.append(Self.message("12345")) }
        #expect(throws: OutboundQueue.Full.bytes(waiting: 5, adding: 6, max: 10)) { try q.append(Self.message("123456")) }
        #expect(OutboundQueue.Full.bytes(waiting: 5, adding: 6, max: 10).description.contains("raise queue.max_bytes"))
        #expect(throws: Never.self) { try q.append(Self.message("1234")) }
        #expect(throws: OutboundQueue.Full.messages(waiting: 2, max: 2)) { try q.append(Self.message("1")) }
        #expect(OutboundQueue.Full.messages(waiting: 2, max: 2).description.contains("raise queue.max_messages"))
        #expect(q.count == 2)
        #expect(q.bytes == 9)
        #expect(Self.texts(&q) == ["12345", "1234"])
        #expect(q.bytes == 0)
    }

    @Test func reservationsCountUntilCommittedOrReleased() throws {
        var q = OutboundQueue(maxMessages: 2, maxBytes: 100)
        try q.reserve(10)
        #expect(!q.isIdle)
        #expect(q.isEmpty)
        try q.reserve(10)
        #expect(throws: OutboundQueue.Full.messages(waiting: 2, max: 2), "a third reservation fits no bound of 2 messages") { try q.reserve(10) }
        q.commit(Self.message("0123456789"), spoolID: 7)
        q.release(10)
        #expect(q.reserved == 0)
        #expect(q.isIdle == false)
        #expect(q.first?.spoolID == 7)
        _ = q.removeFirst()
        #expect(q.isIdle)
    }

    @Test func restoredEntriesSkipTheBoundsAndGoFirstWhenPutBack() throws {
        var q = OutboundQueue(maxMessages: 1, maxBytes: 4)
        try q.append(Self.message("c"))
        let back = ["a", "b-longer-than-the-bound"].map { OutboundQueue.Entry(message: Self.message($0), spoolID: 0) }
        q.restore(back, atFront: true)
        q.restore([OutboundQueue.Entry(message: Self.message("d"), spoolID: 0)], atFront: false)
        #expect(q.count == 4)
        #expect(Self.texts(&q) == ["a", "b-longer-than-the-bound", "c", "d"])
    }
}
