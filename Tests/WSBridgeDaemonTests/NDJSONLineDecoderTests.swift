import NIOCore
import NIOEmbedded
import Testing

@testable import WSBridgeDaemon

/// Client input split into lines, with a length bound that never closes the connection.
@Suite struct NDJSONLineDecoderTests {
    /// Feeds `chunks` one read at a time, then the end of input; returns what came out.
    static func decode(_ chunks: [String], maxLine: Int = 8) throws -> [String] {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandlers([ByteToMessageHandler(NDJSONLineDecoder(maxLine: maxLine)), LocalLines()])
        for chunk in chunks { try channel.writeInbound(ByteBuffer(string: chunk)) }
        _ = try channel.finish()
        var out: [String] = []
        while let line = try channel.readInbound(as: LocalLine.self) {
            switch line {
            case .line(let b): out.append(String(buffer: b))
            case .tooLong(let limit): out.append("tooLong(\(limit))")
            }
        }
        return out
    }

    @Test func linesSplitAtNewlinesWhereverTheReadsEnd() throws {
        #expect(try Self.decode(["a\nb", "c\n", "\nd\r\n"]) == ["a", "bc", "", "d"])
        #expect(try Self.decode(["{\"op\"", ":1}\n"], maxLine: 64) == ["{\"op\":1}"])
    }

    @Test func aLastLineWithoutItsNewlineStillCounts() throws {
        #expect(try Self.decode(["a\nlast"]) == ["a", "last"])
    }

    @Test func anOverlongLineIsReportedOnceAndSkippedToItsNewline() throws {
        // Over the bound within one read, and across reads before its newline arrives.
        #expect(try Self.decode(["123456789\nok\n"]) == ["tooLong(8)", "ok"])
        #expect(try Self.decode(["12345", "6789", "more", "and more\nok\n"]) == ["tooLong(8)", "ok"])
        // An overlong last line without a newline is not delivered.
        #expect(try Self.decode(["ok\n123456789"]) == ["ok", "tooLong(8)"])
    }

    @Test func aLineOfExactlyTheLimitPasses() throws {
        #expect(try Self.decode(["12345678\n"]) == ["12345678"])
    }
}
