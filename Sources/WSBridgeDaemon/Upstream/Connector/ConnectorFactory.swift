import CSystemd
import CWSBridgeLinux
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import WSBridgeCore

#if canImport(Glibc)
    import Glibc
#endif

/// Makes each attempt's `UpstreamConnector` on a thread pool, never on the event loop: reads the
/// token file (at every attempt, so a rotated token is used at the next connect) and builds the
/// TLS context, which loads the system trust store and the configured files. The context is
/// cached and rebuilt only when its settings or one of its files (tls.ca_file, cert_file,
/// key_file: inode, size, mtime) change, or after a reload (`forgetTLS`).
final class ConnectorFactory: Sendable {
    private struct CachedContext {
        var key: TLSKey
        var context: NIOSSLContext
    }

    /// What the context was built from.
    struct TLSKey: Equatable, Sendable {
        var tls: Configuration.TLS
        var files: [FileStamp?]
    }

    /// A file's identity and version, as stat(2) tells it.
    struct FileStamp: Equatable, Sendable {
        var device: UInt64
        var inode: UInt64
        var size: Int64
        var modified: Int64

        init?(path: String) {
            var st = stat()
            guard stat(path, &st) == 0 else { return nil }
            self.device = UInt64(st.st_dev)
            self.inode = UInt64(st.st_ino)
            self.size = Int64(st.st_size)
            self.modified = Int64(st.st_mtim.tv_sec) * 1_000_000_000 + Int64(st.st_mtim.tv_nsec)
        }
    }

    private let cache = NIOLockedValueBox<CachedContext?>(nil)
    private let builds = NIOLockedValueBox(0)
    private let pool: NIOThreadPool
    /// The daemon's environment: the proxy variables (`https_proxy`, `no_proxy`, ...) and
    /// systemd's `CREDENTIALS_DIRECTORY`. The one place the daemon reads it.
    let environment: [String: String]

    init(environment: [String: String] = [:], pool: NIOThreadPool = .singleton) {
        self.environment = environment
        self.pool = pool
    }

    /// The proxy an attempt to `configuration.upstream.url` goes through, if any.
    func proxy(for configuration: Configuration) -> ProxyURL? {
        UpstreamConnector.proxy(for: configuration, environment: self.environment)
    }

    /// How many TLS contexts were built so far (tests check the cache with it).
    var tlsContextsBuilt: Int { self.builds.withLockedValue { $0 } }

    /// Drops the cached TLS context: the next attempt builds a new one (the system trust store
    /// may have changed too). Called on reload.
    func forgetTLS() {
        self.cache.withLockedValue { $0 = nil }
    }

    func connector(configuration: Configuration, on eventLoop: any EventLoop) -> EventLoopFuture<UpstreamConnector> {
        self.pool.runIfActive(eventLoop: eventLoop) {
            try self.make(configuration: configuration)
        }
    }

    /// Blocking: runs on the pool.
    func make(configuration: Configuration) throws -> UpstreamConnector {
        var token: String?
        if let path = configuration.auth.tokenFile {
            switch TokenFile.read(path: path, credentialsDirectory: self.environment["CREDENTIALS_DIRECTORY"]) {
            case .success(let t): token = t
            case .failure(let error): throw error
            }
        }
        return UpstreamConnector(
            upstream: configuration.upstream,
            tls: configuration.tls,
            proxy: self.proxy(for: configuration),
            token: token,
            sslContext: configuration.upstream.url.isTLS ? try self.context(for: configuration.tls) : nil
        )
    }

    private func context(for tls: Configuration.TLS) throws -> NIOSSLContext {
        let key = TLSKey(tls: tls, files: [tls.caFile, tls.certFile, tls.keyFile].map { $0.flatMap(FileStamp.init(path:)) })
        if let cached = self.cache.withLockedValue({ $0 }), cached.key == key {
            return cached.context
        }
        let context: NIOSSLContext
        do {
            context = try Self.build(tls)
        } catch let failure as UpstreamConnector.Failure {
            throw failure
        } catch {
            throw UpstreamConnector.Failure.tlsSetup(cause: "\(error)")
        }
        self.builds.withLockedValue { $0 += 1 }
        self.cache.withLockedValue { $0 = CachedContext(key: key, context: context) }
        return context
    }

    static func build(_ tls: Configuration.TLS) throws -> NIOSSLContext {
        var config = TLSConfiguration.makeClientConfiguration()
        config.minimumTLSVersion = .tlsv12
        if let ca = tls.caFile {
            config.additionalTrustRoots = [.certificates(try Self.load("tls.ca_file", ca, "a PEM certificate") { try NIOSSLCertificate.fromPEMFile($0) })]
        }
        if let cert = tls.certFile, let key = tls.keyFile {
            config.certificateChain = try Self.load("tls.cert_file", cert, "a PEM certificate chain") { try NIOSSLCertificate.fromPEMFile($0) }.map {
                .certificate($0)
            }
            config.privateKey = .privateKey(try Self.load("tls.key_file", key, "a PEM private key") { try NIOSSLPrivateKey(file: $0, format: .pem) })
        }
        if tls.insecure {
            config.certificateVerification = .none
        }
        return try NIOSSLContext(configuration: config)
    }

    /// Loads one TLS file, or says which setting names it and what is wrong with it.
    static func load<T>(_ setting: String, _ path: String, _ what: String, _ body: (String) throws -> T) throws -> T {
        guard access(path, R_OK) == 0 else {
            throw UpstreamConnector.Failure.tlsFile(setting: setting, path: path, .unreadable(String(cString: strerror(errno)).lowercased()))
        }
        do {
            let value = try body(path)
            if let list = value as? [NIOSSLCertificate], list.isEmpty {
                throw UpstreamConnector.Failure.tlsFile(setting: setting, path: path, .noCertificate(what: what))
            }
            return value
        } catch let failure as UpstreamConnector.Failure {
            throw failure
        } catch {
            throw UpstreamConnector.Failure.tlsFile(setting: setting, path: path, .unparsable(what: what, cause: "\(error)"))
        }
    }

    /// What `--check-config` checks beyond the file's syntax: the TLS files load.
    static func check(_ configuration: Configuration) throws {
        if configuration.upstream.url.isTLS || configuration.tls.caFile != nil || configuration.tls.certFile != nil {
            _ = try Self.build(configuration.tls)
        }
    }
}
