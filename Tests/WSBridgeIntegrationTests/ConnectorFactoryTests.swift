import Foundation
import NIOCore
import NIOPosix
import Testing
import WSBridgeCore

@testable import WSBridgeDaemon

/// What an attempt reads from files is read off the event loop, and the TLS context (system
/// trust store included) is built once and rebuilt only when its files or settings change.
@Suite struct ConnectorFactoryTests {
    @Test func theTLSContextIsCachedUntilAFileChanges() async throws {
        let dir = try TemporaryDirectory()
        let certs = try TestCertificates(in: dir)
        var configuration = try LinkHarness.configuration(url: "wss://localhost:9/")
        configuration.tls.caFile = certs.caCert
        let factory = ConnectorFactory()
        let loop = MultiThreadedEventLoopGroup.singleton.next()

        let first = try await factory.connector(configuration: configuration, on: loop).get()
        #expect(first.sslContext != nil)
        _ = try await factory.connector(configuration: configuration, on: loop).get()
        #expect(factory.tlsContextsBuilt == 1)

        // A changed file (here: replaced by another CA, so inode, size or mtime differ) is reloaded.
        let otherDir = try TemporaryDirectory()
        let other = try TestCertificates(in: otherDir)
        try FileManager.default.removeItem(atPath: certs.caCert)
        try FileManager.default.copyItem(atPath: other.caCert, toPath: certs.caCert)
        _ = try await factory.connector(configuration: configuration, on: loop).get()
        #expect(factory.tlsContextsBuilt == 2)

        // Changed settings, and a reload, build anew too.
        configuration.tls.insecure = true
        _ = try await factory.connector(configuration: configuration, on: loop).get()
        #expect(factory.tlsContextsBuilt == 3)
        factory.forgetTLS()
        _ = try await factory.connector(configuration: configuration, on: loop).get()
        #expect(factory.tlsContextsBuilt == 4)

        // ws:// needs none.
        configuration.upstream.url = try UpstreamURL(parsing: "ws://localhost:9/")
        #expect(try await factory.connector(configuration: configuration, on: loop).get().sslContext == nil)
        #expect(factory.tlsContextsBuilt == 4)
    }

    @Test func theTokenIsReadAtEveryAttemptAndAMissingOneFailsIt() async throws {
        let dir = try TemporaryDirectory()
        var configuration = try LinkHarness.configuration(url: "ws://localhost:9/")
        configuration.auth.tokenFile = try dir.write("token", "first\n")
        let factory = ConnectorFactory()
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        #expect(try await factory.connector(configuration: configuration, on: loop).get().token == "first")
        _ = try dir.write("token", "rotated")
        #expect(try await factory.connector(configuration: configuration, on: loop).get().token == "rotated")
        try FileManager.default.removeItem(atPath: configuration.auth.tokenFile!)
        await #expect(throws: TokenFile.ReadError.unreadable(path: configuration.auth.tokenFile!, .cannotOpen(errno: ENOENT))) {
            _ = try await factory.connector(configuration: configuration, on: loop).get()
        }
    }

    @Test func peerGroupsAreLookedUpOffTheLoopAndCached() async throws {
        let cache = GroupCache(lifetime: .seconds(60))
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let uid = getuid()
        let gid = getgid()
        let groups = try await cache.groups(uid: uid, gid: gid, on: loop).get()
        #expect(groups == PeerCredentials.groups(uid: uid, primary: gid) ?? [])
        #expect(cache.lookups == 1)
        _ = try await cache.groups(uid: uid, gid: gid, on: loop).get()
        #expect(cache.lookups == 1)
        // An expired entry is looked up again.
        let short = GroupCache(lifetime: .zero)
        _ = try await short.groups(uid: uid, gid: gid, on: loop).get()
        _ = try await short.groups(uid: uid, gid: gid, on: loop).get()
        #expect(short.lookups == 2)
    }
}
