import Foundation
import Glibc
import NIOCore
import WSBridgeProtocol

/// A raw client of the daemon's Unix socket: lines in, JSON lines out, collected for awaiting.
final class SocketClient: Sendable {
    let lines: LineCollector
    private let handle: FileHandle
    let fd: Int32

    /// Connects; with `reading: false` the client never reads (a stalled subscriber).
    init(path: String, reading: Bool = true, name: String = "client") throws {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        let r = unixSocket(fd, path, connect)
        guard r == 0 else {
            Glibc.close(fd)
            throw TestFailure("cannot connect to \(path): \(String(cString: strerror(errno)))")
        }
        self.fd = fd
        self.lines = LineCollector(name: name)
        self.handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        if reading { self.startReading() }
    }

    /// Connects and waits for the daemon's `hello`. The error says what it read instead and,
    /// given the daemon, how its log ends (did it accept the client, was it busy).
    static func connected(to path: String, name: String = "client", daemon: ManagedProcess? = nil) async throws -> SocketClient {
        let c = try SocketClient(path: path, name: name)
        guard await c.lines.wait(containing: "\"type\":\"hello\"") != nil else {
            let log = daemon.map { "; the daemon's log ends: \($0.stderr.text.suffix(3000))" } ?? ""
            throw TestFailure("no hello from \(path) for \(name); read: \(c.lines.text.prefix(500))\(log)")
        }
        return c
    }

    /// Reads on a thread of its own until the connection ends (`LineCollector.follow`).
    func startReading() {
        self.lines.follow(self.fd, holding: self)
    }

    func send(_ line: String) {
        var bytes = Array(line.utf8)
        bytes.append(0x0A)
        self.sendRaw(bytes)
    }

    func sendRaw(_ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            // MSG_NOSIGNAL: a daemon that died (or was killed) must not take the test runner with it.
            let n = bytes[offset...].withUnsafeBytes { Glibc.send(self.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return }
            offset += n
        }
    }

    func json(_ line: String) -> JSONValue? { try? JSONValue.parse(line) }

    /// Waits for the reply to request `id`.
    func reply(_ id: String, timeout: Duration = .seconds(20)) async -> JSONValue? {
        let line = await self.lines.wait(timeout: timeout) { $0.contains("\"type\":\"reply\"") && $0.contains("\"id\":\"\(id)\"") }
        return line.flatMap { try? JSONValue.parse($0) }
    }

    /// Message lines received so far, parsed.
    var messages: [JSONValue] {
        self.lines.lines.compactMap { try? JSONValue.parse($0) }.filter { $0["type"] == "message" }
    }

    /// Waits (poll(2), on a thread of its own) until the daemon has closed the connection: the
    /// socket reports a hang-up. Does not depend on the readability handler seeing EOF.
    func waitForHangUp(timeout: Duration = .seconds(20)) async -> Bool {
        let fd = self.fd
        let ms = Int32(timeout.components.seconds * 1000)
        return await onThread {
            // No events asked for: poll returns only on a hang-up (the peer closed) or an error.
            var p = pollfd(fd: fd, events: 0, revents: 0)
            return poll(&p, 1, ms) == 1 && (p.revents & Int16(POLLHUP)) != 0
        }
    }

    /// Shuts the connection down (the reading thread then sees the end).
    func close() {
        shutdown(self.fd, Int32(SHUT_RDWR))
    }
}

/// `connect` or `bind` of `fd` to the Unix socket at `path`: 0, or -1 with errno set.
func unixSocket(_ fd: Int32, _ path: String, _ call: (Int32, UnsafePointer<sockaddr>, socklen_t) -> Int32) -> Int32 {
    guard let address = try? SocketAddress(unixDomainSocketPath: path) else {
        errno = ENAMETOOLONG
        return -1
    }
    return address.withSockAddr { call(fd, $0, socklen_t($1)) }
}

/// Runs socat as user nobody (group nogroup, no other groups) against the socket at `path`.
func socatAsNobody(_ path: String) throws -> ManagedProcess {
    try ManagedProcess(
        "/usr/bin/setpriv",
        ["--reuid", "nobody", "--regid", "nogroup", "--clear-groups", "/usr/bin/socat", "-", "UNIX-CONNECT:\(path)"],
        name: "nobody"
    )
}

/// Writes `dir/NAME.toml` for a test daemon: quick backoff, no reachability monitor, its own
/// socket. `upstream` lands in [upstream]; `extra` after the [local] keys (start it with a
/// section header for another section). Returns the path.
func writeDaemonConfig(
    _ dir: TemporaryDirectory, _ name: String, url: String, socket: String, upstream: String = "", extra: String = ""
) throws -> String {
    try dir.write(
        "\(name).toml",
        """
        [upstream]
        url = "\(url)"
        \(upstream)
        [backoff]
        base = "50ms"
        cap = "200ms"
        [reachability]
        enabled = false
        [local]
        socket = "\(socket)"
        \(extra)
        """
    )
}

/// A daemon process with its own socket and an upstream test server, both on loopback.
final class DaemonFixture: Sendable {
    let dir: TemporaryDirectory
    let server: UpstreamServer
    let daemon: ManagedProcess
    let socket: String
    let serverPort: Int

    /// `launcher`: a command that runs the daemon (`prlimit --nofile=64`), exec'ing it in place.
    /// `upstream`: more of the `[upstream]` section. `directory`: where its files go (a new one
    /// when nil), for a config that names a path there.
    init(
        extraConfig: String = "", upstream: String = "", serverArguments: [String] = [], serverKind: UpstreamServer.Kind = .nio, launcher: [String] = [],
        directory: TemporaryDirectory? = nil
    ) async throws {
        self.dir = try directory ?? TemporaryDirectory()
        self.server = try await UpstreamServer(serverKind, arguments: serverArguments)
        self.serverPort = self.server.port
        self.socket = self.dir.file("wsbridged.sock")
        let config = try writeDaemonConfig(self.dir, "wsbridged", url: self.server.url, socket: self.socket, upstream: upstream, extra: extraConfig)
        let command = launcher + daemonCommand(["--config", config, "--log-level", "debug"])
        self.daemon = try ManagedProcess.daemon(command: command, name: "wsbridged")
        guard await self.daemon.awaitLink(.open) else {
            throw TestFailure("daemon did not open the link: \(self.daemon.stderr.text)")
        }
    }

    func client(reading: Bool = true, name: String = "client") async throws -> SocketClient {
        guard reading else { return try SocketClient(path: self.socket, reading: false, name: name) }
        return try await SocketClient.connected(to: self.socket, name: name)
    }

    deinit {
        self.daemon.stop()
    }
}
