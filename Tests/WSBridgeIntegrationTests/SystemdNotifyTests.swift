import Foundation
import Glibc
import Testing

/// A notify socket that nobody reads (PID 1 busy): the daemon goes on serving.
@Suite struct SystemdNotifyTests {
    @Test func aNotifySocketNobodyReadsNeverStallsTheDaemon() async throws {
        let dir = try TemporaryDirectory()
        let server = try await UpstreamServer(.nio)
        // Bound and never read: once its queue is full (net.unix.max_dgram_qlen datagrams, 10 in
        // a container, 512 on most hosts), every further send to it blocks.
        let notifyPath = dir.file("notify.sock")
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(fd) }
        #expect(unixSocket(fd, notifyPath, bind) == 0)
        chmod(notifyPath, 0o666)
        let socket = dir.file("d.sock")
        let config = try writeDaemonConfig(dir, "wsbridged", url: server.url, socket: socket)
        var env = ProcessInfo.processInfo.environment
        env["NOTIFY_SOCKET"] = notifyPath
        let daemon = try ManagedProcess.daemon(["--config", config], environment: env, name: "wsbridged")
        defer { daemon.stop() }
        #expect(await server.event("connected 1") != nil)
        // Each client that comes and goes changes STATUS= ("N subscribers") twice: 600 clients
        // are more changes than any such queue holds. Every one gets its hello. A daemon stalled
        // on the full socket stays stalled, so the wait is long: in the whole suite on two cores
        // the 600 take 150 s, and one hello once took more than 10 s.
        for i in 0..<600 {
            let client = try SocketClient(path: socket, name: "c\(i)")
            guard await client.lines.wait(timeout: .seconds(60), containing: "\"type\":\"hello\"") != nil else {
                Issue.record("client \(i) got no hello: the daemon stalled")
                return
            }
            client.close()
        }
        let reader = try SocketClient(path: socket, name: "reader")
        #expect(await reader.lines.wait(containing: "\"type\":\"hello\"") != nil)
        server.command("send still flowing")
        #expect(await reader.lines.wait(containing: "still flowing") != nil)
        // And it still stops when asked, without waiting on the full socket for long.
        daemon.signal(SIGTERM)
        #expect(await daemon.waitForExit() == 0)
    }
}
