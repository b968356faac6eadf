import NIOCore
import NIOPosix
import WSBridgeCore

#if canImport(Glibc)
    import Glibc
#endif

extension DaemonService {
    /// `[local.websocket]`: the WebSocket face listens beside the NDJSON socket, its apps served
    /// by the same plane. It stops with the socket: its apps are told 1001, going away.
    func startWebSocketFace(_ configuration: Configuration, eventLoop: any EventLoop, plane: NIOLoopBound<LocalPlane>, parts: inout Parts) async throws {
        let settings = configuration.local.webSocket
        guard settings.isOn else { return }
        var token: String?
        if let path = settings.tokenFile {
            switch TokenFile.read(path: path, credentialsDirectory: self.connectors.environment["CREDENTIALS_DIRECTORY"]) {
            case .success(let read): token = read
            case .failure(let error):
                let text = error.describe(key: "local.websocket.token_file")
                throw StartFailure.listen(socket: settings.listen.map { "\($0)" } ?? settings.socket ?? "", cause: text)
            }
        }
        let logger = self.logger
        let face = try await eventLoop.submit { [token] in
            NIOLoopBound(WebSocketFace(limits: settings, token: token, plane: plane.value, logger: logger), eventLoop: eventLoop)
        }.get()
        let channels: [any Channel]
        do {
            channels = try await WebSocketFace.listen(face, configuration: configuration, eventLoop: eventLoop, groups: GroupCache(), logger: logger)
        } catch {
            throw StartFailure.listen(socket: settings.listen.map { "\($0)" } ?? settings.socket ?? "", cause: "\(error)")
        }
        parts.add("websocket") {
            try? await eventLoop.submit { face.value.closeAll() }.get()
            for channel in channels { try? await channel.close() }
            if let path = settings.socket { unlink(path) }
        }
    }
}
