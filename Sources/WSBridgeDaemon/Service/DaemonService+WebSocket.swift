import NIOCore
import NIOPosix
import NIOSSL
import WSBridgeCore

#if canImport(Glibc)
    import Glibc
#endif

extension DaemonService {
    /// `local.websocket.token_file`'s token, read before the plane is built (nil: none set).
    func webSocketToken(_ configuration: Configuration) throws -> String? {
        let settings = configuration.local.webSocket
        guard settings.isOn, let path = settings.tokenFile else { return nil }
        switch TokenFile.read(path: path, credentialsDirectory: self.connectors.environment["CREDENTIALS_DIRECTORY"]) {
        case .success(let token): return token
        case .failure(let error): throw StartFailure.listen(socket: Self.faceName(settings), cause: error.describe(key: "local.websocket.token_file"))
        }
    }

    /// The face's TLS (`local.websocket.tls_cert_file`, `tls_key_file`: `listen` serves wss://),
    /// loaded before it listens; nil: plain.
    static func webSocketTLS(_ settings: Configuration.Local.WebSocket) throws -> NIOSSLContext? {
        guard let cert = settings.tlsCertFile, let key = settings.tlsKeyFile else { return nil }
        do {
            let chain = try ConnectorFactory.load("local.websocket.tls_cert_file", cert, "a PEM certificate chain") { try NIOSSLCertificate.fromPEMFile($0) }
            let privateKey = try ConnectorFactory.load("local.websocket.tls_key_file", key, "a PEM private key") {
                try NIOSSLPrivateKey(file: $0, format: .pem)
            }
            var tls = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(privateKey))
            tls.minimumTLSVersion = .tlsv12
            return try NIOSSLContext(configuration: tls)
        } catch {
            throw StartFailure.listen(socket: Self.faceName(settings), cause: "\(error)")
        }
    }

    /// `[local.websocket]`: the WebSocket face listens beside the NDJSON socket, its apps served
    /// by the same plane. It stops with the socket: its apps are told 1001, going away.
    func startWebSocketFace(_ configuration: Configuration, eventLoop: any EventLoop, plane: NIOLoopBound<LocalPlane>, parts: inout Parts) async throws {
        let settings = configuration.local.webSocket
        guard settings.isOn else { return }
        let tls = try Self.webSocketTLS(settings)
        let channels: [any Channel]
        do {
            channels = try await WebSocketListener.listen(
                plane, configuration: configuration, tls: tls, eventLoop: eventLoop, groups: GroupCache(), logger: self.logger)
        } catch {
            throw StartFailure.listen(socket: Self.faceName(settings), cause: "\(error)")
        }
        parts.add("websocket") {
            try? await eventLoop.submit { plane.value.closeWebSocketApps() }.get()
            for channel in channels { try? await channel.close() }
            if let path = settings.socket { unlink(path) }
        }
    }

    /// The face's address, or its socket, for a start failure.
    private static func faceName(_ settings: Configuration.Local.WebSocket) -> String {
        settings.listen.map { "\($0)" } ?? settings.socket ?? "[local.websocket]"
    }
}
