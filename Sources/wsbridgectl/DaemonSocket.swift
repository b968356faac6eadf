import CWSBridgeLinux
import WSBridgeProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// A blocking connection to wsbridged's socket: sends request lines, reads reply lines.
final class DaemonSocket {
    /// The unit that serves `path`: wsbridged@NAME for /run/wsbridged/NAME.sock, else wsbridged.
    static func unit(for path: String) -> String {
        let prefix = "/run/wsbridged/"
        guard path.hasPrefix(prefix), path.hasSuffix(".sock") else { return "wsbridged" }
        let name = path.dropFirst(prefix.count).dropLast(".sock".count)
        return name.isEmpty || name == "wsbridged" || name.contains("/") ? "wsbridged" : "wsbridged@\(name)"
    }

    /// How to get a daemon listening on `path`: systemctl for the units' own sockets, else a
    /// daemon started by hand on that path.
    static func startHint(for path: String) -> String {
        if path.hasPrefix("/run/wsbridged/") {
            return "start it with `systemctl start \(Self.unit(for: path)).socket`, or point --socket at the socket of the one running"
        }
        return "start one on that path with `wsbridged --socket \(path) --url ws://…` (or local.socket in its config), "
            + "or point --socket (or WSBRIDGE_SOCKET) at the socket of the one running"
    }

    /// Why the daemon's socket could not be reached, how to fix it, and the exit status
    /// (sysexits.h): every text is here.
    enum ConnectError: Error, CustomStringConvertible {
        case socketCall(errno: Int32)
        case pathTooLong(String)
        case notRunning(path: String)
        case permissionDenied(path: String)
        case cannotConnect(path: String, errno: Int32)
        case noHello(path: String)

        var description: String {
            switch self {
            case .socketCall(let e): "cannot create a socket: \(String(cString: strerror(e)))"
            case .pathTooLong(let path): "socket path \(path) is too long (a Unix socket path holds at most 107 bytes)"
            case .notRunning(let path): "wsbridged is not running (nothing listens on \(path)): \(DaemonSocket.startHint(for: path))"
            case .permissionDenied(let path): "permission denied on \(path): run as a member of the socket's group (see `ls -l \(path)`) or as root"
            case .cannotConnect(let path, let e): "cannot connect to \(path): \(String(cString: strerror(e)))"
            case .noHello(let path): "\(path) did not greet like wsbridged (no hello line); is it the right socket?"
            }
        }

        var exitCode: Int32 {
            switch self {
            case .socketCall: 71  // EX_OSERR
            case .pathTooLong: 64  // EX_USAGE
            case .permissionDenied: 77  // EX_NOPERM
            case .notRunning, .cannotConnect, .noHello: 69  // EX_UNAVAILABLE
            }
        }
    }

    struct RequestError: Error, CustomStringConvertible {
        var code: String
        var message: String
        var description: String { "\(self.message) (\(self.code))" }
        var exitCode: Int32 { self.code == ErrorCode.forbidden.rawValue ? 77 : 1 }
    }

    private let fd: Int32
    private var buffer: [UInt8] = []
    private var nextID = 0
    /// The daemon's greeting.
    private(set) var hello: JSONValue = .null

    init(path: String) throws {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw ConnectError.socketCall(errno: errno) }
        let r = cwsb_unix_connect(fd, path)
        if r != 0 {
            let e = errno
            close(fd)
            switch e {
            case ENAMETOOLONG:
                throw ConnectError.pathTooLong(path)
            case ENOENT, ECONNREFUSED:
                throw ConnectError.notRunning(path: path)
            case EACCES, EPERM:
                throw ConnectError.permissionDenied(path: path)
            default:
                throw ConnectError.cannotConnect(path: path, errno: e)
            }
        }
        self.fd = fd
        guard let hello = try? self.readLine() else {
            throw ConnectError.noHello(path: path)
        }
        self.hello = hello
    }

    deinit {
        close(self.fd)
    }

    func write(_ value: JSONValue) throws {
        var bytes: [UInt8] = []
        value.write(into: &bytes)
        bytes.append(UInt8(ascii: "\n"))
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Glibc.write(self.fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw RequestError(code: "io", message: "lost the connection to wsbridged: \(String(cString: strerror(errno)))")
            }
            offset += n
        }
    }

    /// Reads one line as JSON; nil at end of stream.
    func readLine() throws -> JSONValue? {
        try self.readRawLine()?.json
    }

    /// Reads one line: its bytes exactly as the daemon sent them (without the newline), and its JSON.
    func readRawLine() throws -> (raw: [UInt8], json: JSONValue)? {
        while true {
            if let nl = self.buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = Array(self.buffer[..<nl])
                self.buffer.removeSubrange(...nl)
                do {
                    return (line, try JSONValue.parse(line))
                } catch {
                    throw RequestError(code: "protocol", message: "wsbridged sent a line that is not JSON: \(error)")
                }
            }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let n = chunk.withUnsafeMutableBytes { Glibc.read(self.fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw RequestError(code: "io", message: "lost the connection to wsbridged: \(String(cString: strerror(errno)))")
            }
            if n == 0 { return nil }
            self.buffer.append(contentsOf: chunk[0..<n])
        }
    }

    /// Sends a request and waits for its reply, skipping streamed lines. Returns the result.
    func request(_ command: Command, unsubscribeFirst: Bool = true) throws -> JSONValue {
        if unsubscribeFirst {
            try self.write(WSBridgeProtocol.Request(id: "wsbridgectl-unsubscribe", command: .unsubscribe).json)
        }
        self.nextID += 1
        let id = JSONValue.number(JSONNumber(self.nextID))
        try self.write(WSBridgeProtocol.Request(id: id, command: command).json)
        while let json = try self.readLine() {
            guard case .reply(let reply)? = ServerLine.decode(json), reply.id == id else { continue }
            switch reply.outcome {
            case .success(let result): return result
            case .failure(let error): throw RequestError(code: error.code.rawValue, message: error.message)
            }
        }
        throw RequestError(code: "io", message: "wsbridged closed the connection before answering")
    }
}

enum Environment {
    static func value(_ name: String) -> String? {
        guard let v = getenv(name) else { return nil }
        return String(cString: v)
    }
}

enum Output {
    static func line(_ text: String) {
        Self.write(1, text + "\n")
    }

    static func error(_ text: String) {
        Self.write(2, "wsbridgectl: " + text + "\n")
    }

    static func write(_ fd: Int32, _ text: String) {
        var text = text
        text.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let n = Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset)
                if n <= 0 { return }
                offset += n
            }
        }
    }
}
