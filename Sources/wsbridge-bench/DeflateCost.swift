import ArgumentParser
import Foundation
import NIOCore
import WSBridgeCore
import WSBridgeDaemon

/// permessage-deflate alone: nanoseconds to compress and to inflate one message, with context
/// takeover (the default) and without, for small and large JSON-like messages. Medians of runs.
struct DeflateCost: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "deflate",
        abstract: "Nanoseconds per message to compress and to inflate (permessage-deflate)."
    )

    @Option(help: "Messages per run.")
    var messages = 100_000

    @Option(help: "Runs per figure (the median is printed, with the min-max).")
    var runs = 5

    /// A trade-like JSON message of about `size` bytes, different each time.
    static func message(_ i: Int, size: Int) -> ByteBuffer {
        var text =
            #"{"type":"trade","symbol":"BTC-USD","seq":\#(i),"px":\#(60000 + i % 977).\#(i % 100),"qty":\#(i % 13).5,"side":"\#(i % 2 == 0 ? "buy" : "sell")","pad":""#
        while text.utf8.count < size - 2 { text += "abcdefghij".prefix(min(10, size - 2 - text.utf8.count)) }
        return ByteBuffer(string: text + #""}"#)
    }

    func run() throws {
        let allocator = ByteBufferAllocator()
        print("| message | context takeover | compress ns/msg (median, min-max) | inflate ns/msg (median, min-max) | ratio |")
        print("| ---: | :---: | ---: | ---: | ---: |")
        for size in [200, 4096] {
            let inputs = (0..<1000).map { Self.message($0, size: size) }
            for takeover in [true, false] {
                var parameters = DeflateParameters()
                parameters.clientNoContextTakeover = !takeover
                parameters.serverNoContextTakeover = !takeover
                var compressTimes: [Double] = []
                var inflateTimes: [Double] = []
                var ratio = 0.0
                for _ in 0..<self.runs {
                    let sender = try PerMessageDeflate(parameters: parameters)
                    let receiver = try PerMessageDeflate(parameters: parameters)
                    var compressed: [ByteBuffer] = []
                    compressed.reserveCapacity(self.messages)
                    var start = ContinuousClock.now
                    for i in 0..<self.messages {
                        compressed.append(try sender.compress(inputs[i % inputs.count], allocator: allocator))
                    }
                    compressTimes.append((ContinuousClock.now - start).seconds * 1e9 / Double(self.messages))
                    var total = 0
                    start = ContinuousClock.now
                    for data in compressed {
                        total += try receiver.decompress(data, limit: 1 << 20, allocator: allocator).readableBytes
                    }
                    inflateTimes.append((ContinuousClock.now - start).seconds * 1e9 / Double(self.messages))
                    precondition(total == (0..<self.messages).reduce(0) { $0 + inputs[$1 % inputs.count].readableBytes })
                    ratio = Double(compressed.reduce(0) { $0 + $1.readableBytes }) / Double(total)
                }
                func figure(_ t: [Double]) -> String {
                    let s = t.sorted()
                    return String(format: "%.0f (%.0f-%.0f)", s[s.count / 2], s.first!, s.last!)
                }
                print("| \(size) B | \(takeover ? "yes" : "no") | \(figure(compressTimes)) | \(figure(inflateTimes)) | \(String(format: "%.2f", ratio)) |")
            }
        }
    }
}
