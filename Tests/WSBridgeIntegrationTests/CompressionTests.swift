import Foundation
import Testing
import WSBridgeCore
import WSBridgeDaemon
import WSBridgeProtocol

/// permessage-deflate (RFC 7692) against Python websockets, which enables it when offered.
@Suite struct CompressionTests {
    @Test func deflateIsNegotiatedAndCarriesMessagesBothWays() async throws {
        let server = try await UpstreamServer(.python)
        let link = try await LinkHarness(try LinkHarness.configuration(url: server.url))
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        #expect(await link.state(.open) == "state open: connected (permessage-deflate)")
        // Several messages: the compression context is carried across them.
        for i in 0..<5 {
            let text = "compressed \(i) " + String(repeating: "abc", count: 200 * (i + 1))
            #expect(try await link.send(text))
            #expect(await server.event("message \(text)") != nil)
            #expect(await link.events.wait(containing: "message text \(text)") != nil)
        }
        // A large, highly compressible message from the server inflates within the limit.
        server.command("send " + String(repeating: "z", count: 100_000))
        #expect(await link.events.wait(containing: "message text " + String(repeating: "z", count: 100_000)) != nil)
    }

    @Test func compressionOffIsNotOffered() async throws {
        let server = try await UpstreamServer(.python)
        var config = try LinkHarness.configuration(url: server.url)
        config.upstream.compression = false
        let link = try await LinkHarness(config)
        defer { Task { await link.shutdown() } }
        link.handle.connect()
        #expect(await link.state(.open) == "state open: connected")
        #expect(try await link.send("plain"))
        #expect(await link.events.wait(containing: "message text plain") != nil)
    }

    @Test func inflatedSizeIsBoundedByMaxMessageSize() async throws {
        // 1 MB of one byte compresses to about 1 KB: the limit must apply to the inflated size.
        let server = try await UpstreamServer(.python)
        let (link, _) = try await expectOversizeClosesWith1009(server, limit: 64 * 1024, size: 1_000_000)
        await link.shutdown()
    }
}
