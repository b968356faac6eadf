import ArgumentParser
import Foundation
import WSBridgeCore

/// The overflow path alone: what one more message costs a subscriber whose queue is full, for
/// several queue sizes. Before SubscriberQueue, the cost grew with the queue (the whole queue was
/// rebuilt per message; docs/performance.md has the figures); now it must not.
struct DropCost: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "drop",
        abstract: "Nanoseconds per message on a full subscriber queue, for several queue sizes."
    )

    @Option(help: "Messages pushed through each full queue.")
    var messages = 2_000_000

    func run() {
        print("| subscriber_queue | ns per message while dropping |")
        print("| ---: | ---: |")
        for size in [256, 4096, 16384, 262_144] {
            var queue = SubscriberQueue<Line>(limits: .init(messages: size, bytes: .max))
            for seq in 0..<size { queue.appendMessages(Line(), seq: UInt64(seq)) }
            let start = ContinuousClock.now
            var dropped = 0
            for seq in size..<(size + self.messages) {
                dropped += queue.appendMessages(Line(), seq: UInt64(seq))
                if seq % 1000 == 0 { queue.appendControl(Line()) }  // replies in between
            }
            let elapsed = ContinuousClock.now - start
            precondition(dropped >= self.messages - self.messages / 1000)
            print("| \(size) | \(String(format: "%.1f", elapsed.seconds * 1e9 / Double(self.messages))) |")
        }
    }
}

/// A 100-byte line, as the queue sees one.
private struct Line: QueuedLines {
    var lineCount: Int { 1 }
    func lineStart(_ i: Int) -> Int { i == 0 ? 0 : 100 }
}
