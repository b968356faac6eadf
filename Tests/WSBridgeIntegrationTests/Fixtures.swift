import CWSBridgeLinux
import Foundation
import Synchronization

/// Where the built executables and the project's tools are.
enum Paths {
    static let root: String = {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    }()

    static let bin: String = {
        if let dir = ProcessInfo.processInfo.environment["WSBRIDGE_BIN_DIR"], !dir.isEmpty { return dir }
        return "\(root)/.build/debug"
    }()

    /// WSBRIDGE_DAEMON: scripts/test's copy of the daemon where the checkout is not reachable by
    /// the daemon's unprivileged user (a clone under a private home directory).
    static let daemon: String = {
        if let path = ProcessInfo.processInfo.environment["WSBRIDGE_DAEMON"], !path.isEmpty { return path }
        return "\(bin)/wsbridged"
    }()
    static var testServer: String { "\(bin)/wsbridge-testserver" }

    static let python: String = {
        if let p = ProcessInfo.processInfo.environment["WSBRIDGE_PYTHON"], !p.isEmpty { return p }
        return "\(root)/.build/venv/bin/python"
    }()

    static var pythonPeer: String { "\(root)/Tests/peers/ws_server.py" }

    /// The Python of the apps' client libraries (gql, web3, python-socketio, nats-py,
    /// selenium): a venv of their own (scripts/setup), as an app's would be, apart from the
    /// servers' (their pins differ).
    static var appsPython: String { "\(root)/.build/venv-apps/bin/python" }
}

/// Who the daemon runs as in the tests: never root. Run as root (as CI runs them), the tests start
/// the daemon as the unprivileged user `wsbridge-test` (made by scripts/setup), whose primary
/// group is `wsbridge-test` and who is also in `wsbridge-test-app`: the shape of the units'
/// `User=wsbridge`, `Group=wsbridge`. A permission that the daemon needs and lacks then fails a
/// test instead of hiding behind root. Run as another user, the daemon runs as that user.
/// No test runs the daemon as root.
enum DaemonUser {
    static let name = "wsbridge-test"
    /// A group the daemon's user is in besides its own (a socket's `local.group`).
    static let appGroup = "wsbridge-test-app"

    static let switches: Bool = getuid() == 0

    static let ids: (uid: uid_t, gid: gid_t)? = {
        guard switches, let pw = getpwnam(name) else { return nil }
        return (pw.pointee.pw_uid, pw.pointee.pw_gid)
    }()

    /// `command` run as the daemon's user (unchanged when the tests do not run as root).
    static func wrap(_ command: [String]) -> [String] {
        guard switches else { return command }
        precondition(ids != nil, "user \(name) is missing: scripts/setup creates it (the tests run the daemon unprivileged)")
        return ["/usr/bin/setpriv", "--reuid", name, "--regid", name, "--init-groups", "--inh-caps=-all", "--bounding-set=-all", "--"] + command
    }

    /// Gives `path` to the daemon's user (when the tests run as root): a file it must read that
    /// a test made as root with a private mode (a TLS key), or a directory it must write in.
    static func handOver(_ path: String) {
        guard let ids else { return }
        _ = chown(path, ids.uid, ids.gid)
    }
}

/// The daemon's command line: `wsbridged ARGUMENTS`, run as `DaemonUser`.
func daemonCommand(_ arguments: [String]) -> [String] {
    DaemonUser.wrap([Paths.daemon] + arguments)
}

extension ManagedProcess {
    /// The daemon, as `DaemonUser`.
    static func daemon(
        _ arguments: [String], environment: [String: String]? = nil, name: String? = "wsbridged", journalStream: Bool = false,
        events: DatagramListener? = nil
    ) throws -> ManagedProcess {
        try ManagedProcess.daemon(command: daemonCommand(arguments), environment: environment, name: name, journalStream: journalStream, events: events)
    }
}

/// The daemon run to completion, as `DaemonUser` (`spawnAndWait`).
func spawnDaemonAndWait(_ arguments: [String], environment: [String: String]? = nil) throws -> (status: Int32, stdout: String, stderr: String) {
    let command = daemonCommand(arguments)
    return try spawnAndWait(command[0], Array(command.dropFirst()), environment: environment)
}

/// A fresh temporary directory, removed (after what was mounted in it) when the value is
/// released. The daemon's user owns it (`DaemonUser`), so the daemon can make its socket, spool
/// and journal there.
final class TemporaryDirectory: Sendable {
    let path: String
    private let mounts = Mutex<[String]>([])

    init() throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("wsbridge-test-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        self.path = base.path
        DaemonUser.handOver(self.path)
    }

    func file(_ name: String) -> String { "\(self.path)/\(name)" }

    func write(_ name: String, _ text: String) throws -> String {
        let p = self.file(name)
        try text.write(toFile: p, atomically: true, encoding: .utf8)
        return p
    }

    /// A small tmpfs (a disk that fills up) mounted at `small` in this directory; its path.
    /// Needs root.
    func mountSmallTmpfs(size: String) throws -> String {
        let path = self.file("small")
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        let owner = DaemonUser.ids.map { ",uid=\($0.uid),gid=\($0.gid)" } ?? ""
        let mounted = try spawnAndWait("/bin/mount", ["-t", "tmpfs", "-o", "size=\(size),mode=0700\(owner)", "tmpfs", path])
        guard mounted.status == 0 else { throw TestFailure("mount: \(mounted.stderr)") }
        self.mounts.withLock { $0.append(path) }
        return path
    }

    deinit {
        for path in self.mounts.withLock({ $0 }) { _ = try? spawnAndWait("/bin/umount", ["-l", path]) }
        try? FileManager.default.removeItem(atPath: self.path)
    }
}

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Runs blocking work on a thread of its own, not on the cooperative pool (two threads on these
/// machines: two blocked test bodies would starve every other test).
func onThread<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        Thread.detachNewThread { continuation.resume(returning: body()) }
    }
}

/// Runs a command to completion; throws with its output when it fails. stdout and stderr are
/// merged into `output`.
@discardableResult
func run(
    _ executable: String,
    _ arguments: [String],
    environment: [String: String]? = nil,
    directory: String? = nil,
    allowFailure: Bool = false
) throws -> (status: Int32, output: String) {
    let r = try spawnAndWait(executable, arguments, environment: environment, directory: directory, mergeErrors: true)
    if r.status != 0 && !allowFailure {
        throw TestFailure("\(executable) \(arguments.joined(separator: " ")) exited \(r.status): \(r.stdout)")
    }
    return (r.status, r.stdout)
}

/// posix_spawn + waitpid, without Foundation's Process (whose waitUntilExit was seen to hang when
/// many processes start and end at once). Feeds `stdin`, reads stdout and stderr to the end.
func spawnAndWait(
    _ executable: String,
    _ arguments: [String],
    environment: [String: String]? = nil,
    directory: String? = nil,
    stdin: String? = nil,
    mergeErrors: Bool = false
) throws -> (status: Int32, stdout: String, stderr: String) {
    var inPipe: [Int32] = [-1, -1]
    var outPipe: [Int32] = [-1, -1]
    var errPipe: [Int32] = [-1, -1]
    // Close-on-exec: a process another test spawns meanwhile must not inherit these ends (a
    // long-lived daemon holding the write end would keep this read from ever seeing the end).
    // The child's own copies (dup2 onto 0, 1 and 2) are not close-on-exec.
    guard cwsb_pipe_cloexec(&inPipe) == 0, cwsb_pipe_cloexec(&outPipe) == 0, cwsb_pipe_cloexec(&errPipe) == 0 else {
        throw TestFailure("pipe failed")
    }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_adddup2(&actions, inPipe[0], 0)
    posix_spawn_file_actions_adddup2(&actions, outPipe[1], 1)
    posix_spawn_file_actions_adddup2(&actions, mergeErrors ? outPipe[1] : errPipe[1], 2)
    for fd in inPipe + outPipe + errPipe { posix_spawn_file_actions_addclose(&actions, fd) }
    let env = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
    var argv = [executable] + arguments
    var program = executable
    if let directory {
        // Glibc's Swift module lacks posix_spawn_file_actions_addchdir_np: let sh change directory.
        argv = ["/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", directory] + argv
        program = "/bin/sh"
    }
    var pid: pid_t = 0
    let cArgs = argv.map { strdup($0) } + [nil]
    let cEnv = env.map { strdup($0) } + [nil]
    defer {
        for arg in cArgs { free(arg) }
        for entry in cEnv { free(entry) }
    }
    let rc = posix_spawn(&pid, program, &actions, nil, cArgs, cEnv)
    close(inPipe[0])
    close(outPipe[1])
    close(errPipe[1])
    guard rc == 0 else {
        close(inPipe[1])
        close(outPipe[0])
        close(errPipe[0])
        throw TestFailure("cannot start \(executable): \(String(cString: strerror(rc)))")
    }
    if let stdin {
        var bytes = Array(stdin.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeMutableBytes { write(inPipe[1], $0.baseAddress, $0.count) }
            if n <= 0 { break }
            offset += n
        }
        bytes.removeAll()
    }
    close(inPipe[1])
    // Read both pipes until both end (poll, so neither can fill up and block the child).
    var out: [UInt8] = []
    var err: [UInt8] = []
    var open: [Int32] = [outPipe[0], errPipe[0]]
    var buffer = [UInt8](repeating: 0, count: 65536)
    while !open.isEmpty {
        var fds = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        if poll(&fds, nfds_t(fds.count), -1) < 0 { if errno == EINTR { continue } else { break } }
        for p in fds where p.revents != 0 {
            let n = buffer.withUnsafeMutableBytes { read(p.fd, $0.baseAddress, $0.count) }
            if n > 0 {
                if p.fd == outPipe[0] { out.append(contentsOf: buffer[0..<n]) } else { err.append(contentsOf: buffer[0..<n]) }
            } else {
                close(p.fd)
                open.removeAll { $0 == p.fd }
            }
        }
    }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    let code: Int32 = (status & 0x7F) == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
    return (code, String(decoding: out, as: UTF8.self), String(decoding: err, as: UTF8.self))
}

/// An upstream WebSocket server in a child process: ours (`wsbridge-testserver`) or Python's
/// `websockets` (Tests/peers/ws_server.py). Both speak the same stdin/stdout control protocol.
final class UpstreamServer: Sendable {
    enum Kind: String, Sendable, CaseIterable, CustomStringConvertible {
        case nio
        case python
        var description: String { self.rawValue }
    }

    let process: ManagedProcess
    let port: Int
    let kind: Kind

    init(_ kind: Kind, arguments: [String] = [], wrapper: [String] = []) async throws {
        self.kind = kind
        let command: [String] =
            switch kind {
            case .nio: wrapper + [Paths.testServer] + arguments
            case .python: wrapper + [Paths.python, "-u", Paths.pythonPeer] + arguments
            }
        self.process = try ManagedProcess(command[0], Array(command.dropFirst()), name: "upstream-\(kind)")
        guard let line = await self.process.stdout.wait(timeout: .seconds(30), { $0.hasPrefix("listening ") }),
            let port = Int(line.dropFirst("listening ".count))
        else {
            self.process.stop()
            throw TestFailure("\(kind) upstream did not start: \(self.process.stderr.text)")
        }
        self.port = port
    }

    var url: String { "ws://127.0.0.1:\(self.port)/" }

    func command(_ line: String) { self.process.send(line) }

    /// Waits for an event line (from `from` on) starting with `prefix`.
    func event(_ prefix: String, from: Int = 0, timeout: Duration = .seconds(20)) async -> String? {
        await self.process.stdout.wait(from: from, timeout: timeout) { $0.hasPrefix(prefix) }
    }

    var mark: Int { self.process.stdout.count }

    deinit { self.process.stop() }
}

/// Certificates made at test time with openssl: a CA, a server certificate for
/// localhost/127.0.0.1/feed.test, and a client certificate for mutual TLS. No key is committed.
struct TestCertificates: Sendable {
    let caCert: String
    let serverCert: String
    let serverKey: String
    /// A server certificate naming only DNS:localhost and DNS:feed.test (no IP address), for
    /// name-verification tests: NIOSSL also accepts a certificate whose IP SAN matches the peer.
    let namedCert: String
    let namedKey: String
    let clientCert: String
    let clientKey: String

    init(in dir: TemporaryDirectory) throws {
        let openssl = "/usr/bin/openssl"
        self.caCert = dir.file("ca.pem")
        let caKey = dir.file("ca.key")
        try run(
            openssl, ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", caKey, "-out", self.caCert, "-days", "2", "-subj", "/CN=wsbridge test CA"])
        let ca = (self.caCert, caKey)
        (self.serverCert, self.serverKey) = try Self.issue(
            ca: ca,
            in: dir,
            "server",
            "/CN=localhost",
            "subjectAltName=DNS:localhost,DNS:feed.test,IP:127.0.0.1,IP:::1\nextendedKeyUsage=serverAuth\n"
        )
        (self.namedCert, self.namedKey) = try Self.issue(
            ca: ca,
            in: dir,
            "named",
            "/CN=feed.test",
            "subjectAltName=DNS:localhost,DNS:feed.test\nextendedKeyUsage=serverAuth\n"
        )
        (self.clientCert, self.clientKey) = try Self.issue(ca: ca, in: dir, "client", "/CN=wsbridge client", "extendedKeyUsage=clientAuth\n")
        // openssl writes keys 0600: the daemon (and the test servers) read them as their own.
        for key in [self.serverKey, self.namedKey, self.clientKey, caKey] { DaemonUser.handOver(key) }
    }

    private static func issue(ca: (cert: String, key: String), in dir: TemporaryDirectory, _ name: String, _ subject: String, _ ext: String) throws -> (
        String, String
    ) {
        let openssl = "/usr/bin/openssl"
        let key = dir.file("\(name).key")
        let csr = dir.file("\(name).csr")
        let cert = dir.file("\(name).pem")
        let extFile = try dir.write("\(name).ext", ext)
        try run(openssl, ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", subject])
        try run(openssl, ["x509", "-req", "-in", csr, "-CA", ca.cert, "-CAkey", ca.key, "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", extFile])
        return (cert, key)
    }
}

/// `run` for the daemon, as `DaemonUser`.
@discardableResult
func runDaemon(_ arguments: [String], allowFailure: Bool = false) throws -> (status: Int32, output: String) {
    let command = daemonCommand(arguments)
    return try run(command[0], Array(command.dropFirst()), allowFailure: allowFailure)
}

struct SocketCallFailed: Error, CustomStringConvertible {
    var call: String
    var code: Int32
    var description: String { "\(self.call): \(String(cString: strerror(self.code)))" }
}

/// A Unix stream socket bound and listening at `path` (close it and the file stays: a stale socket).
func listeningUnixSocket(at path: String) throws -> Int32 {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw SocketCallFailed(call: "socket", code: errno) }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { sunPath in
        for (i, byte) in path.utf8.enumerated() { sunPath[i] = byte }
    }
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    guard bound == 0, listen(fd, 1) == 0 else {
        let code = errno
        close(fd)
        throw SocketCallFailed(call: "bind \(path)", code: code)
    }
    return fd
}
