import Foundation
import Logging
import NIOConcurrencyHelpers
import ServiceLifecycle
import Testing
import WSBridgeCore
import WSBridgeDaemon
import WSBridgeProtocol

/// The daemon as a ServiceLifecycle service, in this process: a `ServiceGroup` runs it against a
/// real upstream and a real Unix socket; reload and graceful shutdown are driven through the
/// service and the group (whole-process tests send the real SIGHUP and SIGTERM).
@Suite struct DaemonServiceTests {
    final class Loader: Sendable {
        let configuration: NIOLockedValueBox<Configuration>
        let failing = NIOLockedValueBox(false)
        init(_ c: Configuration) { self.configuration = NIOLockedValueBox(c) }
        func load() throws -> Configuration {
            if self.failing.withLockedValue({ $0 }) { throw TestFailure("wsbridged.toml: line 3: broken on purpose") }
            return self.configuration.withLockedValue { $0 }
        }
    }

    static var logger: Logger {
        var logger = Logger(label: "wsbridge.test.service")
        logger.logLevel = .critical
        return logger
    }

    func status(_ client: SocketClient, _ id: String) async throws -> StatusReport {
        client.send(#"{"id":"\#(id)","op":"status"}"#)
        guard let reply = await client.reply(id), case .reply(let line)? = ServerLine.decode(reply), case .success(let result) = line.outcome else {
            throw TestFailure("no status reply: \(client.lines.text)")
        }
        return try StatusReport(json: result)
    }

    @Test func reloadAppliesAndGracefulShutdownStopsCleanly() async throws {
        let dir = try TemporaryDirectory()
        let server = try await UpstreamServer(.nio)
        var configuration = try LinkHarness.configuration(url: server.url)
        configuration.local.socket = dir.file("in-process.sock")
        let loader = Loader(configuration)
        let service = DaemonService(configuration: configuration, environment: [:], logger: Self.logger, load: { try loader.load() })
        let group = ServiceGroup(services: [service], logger: Self.logger)
        let running = Task { try await group.run() }

        await service.waitUntilStarted()
        let client = try SocketClient(path: configuration.local.socket)
        #expect(await client.lines.wait(containing: #""type":"hello""#) != nil)
        #expect(await client.lines.wait(containing: #""state":"open""#) != nil, "\(client.lines.text)")
        #expect(try await self.status(client, "before").queue.maxMessages == configuration.queue.maxMessages)

        // A reload applies the new limits to the running daemon...
        loader.configuration.withLockedValue { $0.queue.maxMessages = 7 }
        await service.reload()
        #expect(try await self.status(client, "after").queue.maxMessages == 7)
        // ...and one that does not load keeps the running configuration.
        loader.failing.withLockedValue { $0 = true }
        loader.configuration.withLockedValue { $0.queue.maxMessages = 9 }
        await service.reload()
        let kept = try await self.status(client, "kept")
        #expect(kept.queue.maxMessages == 7 && kept.state == .open)

        // Graceful shutdown: the upstream is closed, subscribers are told and see EOF, the
        // socket file is removed, and run() returns.
        await group.triggerGracefulShutdown()
        try await running.value
        let stopped = await client.lines.wait(containing: #""state":"stopped""#)
        // Said as the daemon's own close, not the server's echo of it.
        #expect(stopped?.contains("closed by the daemon: wsbridged is stopping (code 1001)") == true, "\(client.lines.text)")
        #expect(await client.waitForHangUp())
        #expect(!FileManager.default.fileExists(atPath: configuration.local.socket))
    }

    @Test func aSocketItCannotBindFailsTheStartWithItsExitCode() async throws {
        let dir = try TemporaryDirectory()
        var c = try LinkHarness.configuration(url: "ws://127.0.0.1:9/")
        c.local.socket = try dir.write("not-a-socket", "a regular file")
        let configuration = c
        let service = DaemonService(configuration: configuration, environment: [:], logger: Self.logger, load: { configuration })
        let group = ServiceGroup(services: [service], logger: Self.logger)
        await #expect(throws: DaemonService.StartFailure.self) { try await group.run() }
        // A waiter learns that the start failed instead of waiting forever.
        #expect(await service.waitUntilStarted() == false)
        do {
            try await ServiceGroup(services: [service], logger: Self.logger).run()
            Issue.record("the daemon started on a regular file")
        } catch let failure as DaemonService.StartFailure {
            #expect(failure.exitCode == 69)
            #expect(failure.description.contains("not a socket"))
        }
        // The file that was there is left alone.
        #expect(try String(contentsOfFile: configuration.local.socket, encoding: .utf8) == "a regular file")
    }
}
