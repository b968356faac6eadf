import Foundation
import Glibc
import Testing

/// The fixture that starts third-party servers on free ports tells its own server's listener
/// from another process's on the same port.
@Suite struct ListeningPortsTests {
    /// A socket of this process listening on 127.0.0.1:port.
    static func listen(on port: Int) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard loopbackTCP(fd, port, bind) == 0, Glibc.listen(fd, 1) == 0 else {
            close(fd)
            throw TestFailure("cannot listen on \(port)")
        }
        return fd
    }

    @Test func aPortIsAProcessesOnlyWhenItsOwnSocketListensThere() async throws {
        let port = try freePort()
        #expect(port < 32768)
        #expect(TCPListener.on(port: port, process: getpid()) == .nobody)
        let fd = try Self.listen(on: port)
        defer { close(fd) }
        #expect(TCPListener.on(port: port, process: getpid()) == .process)
        // Another process (a sleeping child) does not hold this socket.
        let other = try ManagedProcess("/bin/sleep", ["30"])
        defer { other.stop() }
        #expect(TCPListener.on(port: port, process: other.pid) == .another)
        await #expect(throws: PortTaken.self) { try await waitUntilListening(port: port, by: { other.pid }) }
        try await waitUntilListening(port: port, by: { getpid() })
    }

    /// /proc/net/tcp comes in parts: a listener far down a long table is seen too (a busy
    /// machine's: the whole suite's servers and clients).
    @Test func everyListenerOfALongTableIsSeen() throws {
        var listeners: [(fd: Int32, port: Int)] = []
        defer { for l in listeners { close(l.fd) } }
        while listeners.count < 300 {
            let port = try freePort()
            guard let fd = try? Self.listen(on: port) else { continue }
            listeners.append((fd, port))
        }
        // Every tenth: some of them far down the table, whatever its order.
        let checked = listeners.enumerated().filter { $0.offset % 10 == 0 }.map(\.element.port)
        let unseen = checked.filter { TCPListener.on(port: $0, process: getpid()) != .process }
        #expect(unseen.isEmpty, "\(unseen.count) of \(checked.count) listeners unseen")
    }

    @Test func aServerWhosePortWasTakenStartsAgainOnAnother() async throws {
        // The first port offered is taken by a listener of this process before the server starts.
        var taken: [Int32] = []
        let (server, port) = try await startListening("microsocks") { port in
            if taken.isEmpty { taken.append(try Self.listen(on: port)) }
            return try ManagedProcess("/usr/bin/microsocks", ["-i", "127.0.0.1", "-p", "\(port)"], name: "microsocks")
        }
        defer {
            server.stop()
            for fd in taken { close(fd) }
        }
        #expect(taken.count == 1)
        #expect(TCPListener.on(port: port, process: server.pid) == .process)
    }
}
