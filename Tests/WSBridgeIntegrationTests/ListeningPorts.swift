import Foundation
import Glibc
import NIOCore

// Ports for the third-party servers a test starts (RabbitMQ, tinyproxy, microsocks), which take
// the port on their command line. A port is picked here and bound there a moment (or, for
// RabbitMQ, seconds) later: in between another process can take it. So the pick avoids the
// kernel's ephemeral range (which every connect(2) and bind to port 0 draws from), and a
// server counts as started only once *its own process* listens on the port: a server of a
// parallel test answering there instead (seen: a STOMP test froze its broker while its daemon
// talked to another test's broker on the same port) is a port lost, and the server starts
// again on another.

/// A loopback port below the kernel's ephemeral range that nobody has bound now.
func freePort() throws -> Int {
    let ephemeralStart = Int(ephemeralPortRange().lowerBound)
    for _ in 0..<200 {
        let port = Int.random(in: 20000..<max(20001, ephemeralStart))
        if bindable(port) { return port }
    }
    throw TestFailure("no free loopback port between 20000 and \(ephemeralStart)")
}

/// net.ipv4.ip_local_port_range (Linux's default when unreadable).
private func ephemeralPortRange() -> ClosedRange<Int> {
    let text = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)) ?? ""
    let bounds = text.split(whereSeparator: \.isWhitespace).compactMap { Int($0) }
    guard bounds.count == 2, bounds[0] <= bounds[1] else { return 32768...60999 }
    return bounds[0]...bounds[1]
}

/// Whether 127.0.0.1:port can be bound now (without SO_REUSEADDR: a socket in TIME_WAIT counts).
private func bindable(_ port: Int) -> Bool {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    return loopbackTCP(fd, port, bind) == 0
}

/// `bind` or `connect` of `fd` to 127.0.0.1:port (0: any port): 0, or -1 with errno set.
func loopbackTCP(_ fd: Int32, _ port: Int, _ call: (Int32, UnsafePointer<sockaddr>, socklen_t) -> Int32) -> Int32 {
    guard let address = try? SocketAddress(ipAddress: "127.0.0.1", port: port) else { return -1 }
    return address.withSockAddr { call(fd, $0, socklen_t($1)) }
}

/// The port `fd` is bound to.
private func boundPort(_ fd: Int32) -> Int? {
    var address = sockaddr_in()
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let r = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
    return r == 0 ? Int(UInt16(bigEndian: address.sin_port)) : nil
}

/// Another process listens on the port a server of the test was to take.
struct PortTaken: Error, CustomStringConvertible {
    let port: Int
    var description: String { "another process listens on port \(self.port)" }
}

/// Who listens on a TCP port, from /proc: the listening sockets' inodes, and whether one of them
/// is among a process's descriptors.
enum TCPListener {
    case nobody
    case process
    case another

    static func on(port: Int, process pid: Int32?) -> TCPListener {
        let listening = self.listeningInodes(port: port)
        if listening.isEmpty { return .nobody }
        guard let pid, !listening.isDisjoint(with: self.socketInodes(of: pid)) else { return .another }
        return .process
    }

    /// The inodes of the sockets in LISTEN state (st 0A) on `port`, on any address.
    private static func listeningInodes(port: Int) -> Set<String> {
        var inodes: Set<String> = []
        // The local address ends ":PORT " (hex): only such lines are read field by field.
        let needle = ":" + String(port, radix: 16, uppercase: true).leftPadded(to: 4) + " "
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            for line in Self.read(table).split(separator: "\n").dropFirst() where line.contains(needle) {
                let fields = line.split(whereSeparator: \.isWhitespace)
                guard fields.count > 9, fields[3] == "0A", let colon = fields[1].lastIndex(of: ":"),
                    Int(fields[1][fields[1].index(after: colon)...], radix: 16) == port
                else { continue }
                inodes.insert(String(fields[9]))
            }
        }
        return inodes
    }

    /// A /proc file to its end. Its size reads as 0, and a read gives only part of a long table:
    /// read until read(2) says there is no more (Foundation's file reading stopped at the first
    /// part, and a listener among a busy machine's hundreds of sockets went unseen).
    private static func read(_ path: String) -> String {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return "" }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            bytes.append(contentsOf: chunk[0..<n])
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The inodes of the sockets among `pid`'s descriptors (`socket:[inode]` links).
    private static func socketInodes(of pid: Int32) -> Set<String> {
        let dir = "/proc/\(pid)/fd"
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []
        return Set(
            entries.compactMap { entry -> String? in
                guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "\(dir)/\(entry)"),
                    target.hasPrefix("socket:["), target.hasSuffix("]")
                else { return nil }
                return String(target.dropFirst("socket:[".count).dropLast())
            })
    }
}

/// Waits until process `pid()` (nil while not known yet) itself listens on `port`; throws
/// `PortTaken` as soon as another process listens there instead.
func waitUntilListening(port: Int, by pid: () -> Int32?, timeout: Duration = .seconds(10), every: Duration = .milliseconds(20)) async throws {
    let listener = try await eventually(
        "process to listen on 127.0.0.1:\(port)", timeout: timeout, every: every, { TCPListener.on(port: port, process: pid()) },
        until: { $0 != .nobody })
    if listener == .another { throw PortTaken(port: port) }
}

/// A server a test starts on a port it is given, and how to tell it is the one listening.
protocol PortServer {
    /// The process that listens (nil while not known yet).
    var listenerPID: Int32? { get }
    /// Stops it and waits until it is gone.
    func stopAndWait() async
    /// The end of its output, for a failure that says why it did not start.
    var logTail: String { get }
}

extension ManagedProcess: PortServer {
    var listenerPID: Int32? { self.pid }
    func stopAndWait() async {
        self.stop()
        _ = await self.waitForExit()
    }
    var logTail: String { String((self.stdout.text + self.stderr.text).suffix(3000)) }
}

/// Starts `name` on `fixed` (a restart), or on a free port and again on another while a
/// parallel test's server takes the port first (three times at most), until its own process
/// listens there. A server that does not start is stopped, and the error says why.
func startListening<Server: PortServer>(
    _ name: String, on fixed: Int? = nil, timeout: Duration = .seconds(10), every: Duration = .milliseconds(20), _ start: (Int) throws -> Server
) async throws -> (Server, Int) {
    var attempt = 1
    while true {
        let port = try fixed ?? freePort()
        let server = try start(port)
        do {
            try await waitUntilListening(port: port, by: { server.listenerPID }, timeout: timeout, every: every)
            return (server, port)
        } catch let error as PortTaken where fixed == nil && attempt < 3 {
            print("\(error) before \(name) did: starting it again on another port")
            await server.stopAndWait()
            attempt += 1
        } catch {
            await server.stopAndWait()
            throw TestFailure("\(name) did not start on port \(port): \(error); its output ends: \(server.logTail)")
        }
    }
}

/// A loopback port bound but not listening: connecting to it is refused, and no other test can
/// take it until `release()` (a port merely freed can be reused at once by a parallel test).
final class ReservedPort: Sendable {
    let port: Int
    private let fd: Int32

    init() throws {
        let (fd, port) = try Self.bindEphemeral()
        self.fd = fd
        self.port = port
    }

    func release() {
        close(self.fd)
    }

    private static func bindEphemeral() throws -> (Int32, Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0, loopbackTCP(fd, 0, bind) == 0, let port = boundPort(fd) else {
            let reason = String(cString: strerror(errno))
            if fd >= 0 { close(fd) }
            throw TestFailure("cannot bind a loopback port: \(reason)")
        }
        return (fd, port)
    }
}

extension String {
    /// This text with zeros before it, to `width` characters.
    fileprivate func leftPadded(to width: Int) -> String { String(repeating: "0", count: max(0, width - self.count)) + self }
}
