import Foundation
import Testing
import WSBridgeProtocol

@testable import WSBridgeCore

@Suite struct UpstreamURLTests {
    @Test func parsesForms() throws {
        #expect(try UpstreamURL(parsing: "ws://h") == UpstreamURL(scheme: .ws, host: "h", port: 80, path: "/"))
        #expect(try UpstreamURL(parsing: "WSS://h?q=1") == UpstreamURL(scheme: .wss, host: "h", port: 443, path: "/?q=1"))
        #expect(try UpstreamURL(parsing: "ws://[::1]:9/a#frag") == UpstreamURL(scheme: .ws, host: "::1", port: 9, path: "/a"))
        #expect(try UpstreamURL(parsing: "ws://[::1]:9/a").hostHeader == "[::1]:9")
        #expect(try UpstreamURL(parsing: "wss://h:443/").hostHeader == "h")
        #expect(try UpstreamURL(parsing: "ws://h:8080/x").description == "ws://h:8080/x")
    }

    @Test func proxyFromEnvironment() throws {
        let wss = try UpstreamURL(parsing: "wss://feed.test/")
        let ws = try UpstreamURL(parsing: "ws://feed.test/")
        #expect(ProxyURL.fromEnvironment(["https_proxy": "http://127.0.0.1:8888"], for: wss) == ProxyURL(kind: .httpConnect, host: "127.0.0.1", port: 8888))
        #expect(ProxyURL.fromEnvironment(["HTTPS_PROXY": "127.0.0.1:8888"], for: wss) == ProxyURL(kind: .httpConnect, host: "127.0.0.1", port: 8888))
        #expect(ProxyURL.fromEnvironment(["https_proxy": "http://127.0.0.1:8888"], for: ws) == nil)
        #expect(ProxyURL.fromEnvironment(["all_proxy": "socks5://127.0.0.1"], for: ws) == ProxyURL(kind: .socks5, host: "127.0.0.1", port: 1080))
        #expect(ProxyURL.fromEnvironment(["all_proxy": "socks5://127.0.0.1", "no_proxy": "localhost,.test"], for: ws) == nil)
        #expect(ProxyURL.fromEnvironment(["all_proxy": "socks5://127.0.0.1", "NO_PROXY": "*"], for: ws) == nil)
        #expect(ProxyURL.fromEnvironment(["all_proxy": "socks5://127.0.0.1", "no_proxy": "other.test"], for: ws) != nil)
    }
}
