import CWSBridgeLinux
import Logging
import NIOCore
import NIOPosix
import WSBridgeCore

#if canImport(Glibc)
    import Glibc
#endif

/// The Unix socket local programs connect to: binds (replacing a stale socket file, never a live
/// daemon's), applies mode and group, and gives every connection a `LocalClient`.
enum LocalServer {
    struct BindError: Error, CustomStringConvertible {
        var description: String
    }

    /// Makes `path` free to bind: a live daemon there is an error; a dead socket file is removed; a
    /// missing directory is created (one level) and returned, for the log.
    @discardableResult
    static func prepare(path: String) throws(BindError) -> String? {
        let address: SocketAddress
        do {
            address = try SocketAddress(unixDomainSocketPath: path)
        } catch {
            throw BindError(
                description:
                    "the socket path \(path) is \(path.utf8.count) bytes; a Unix socket path holds at most 107 (108 with its terminating NUL): choose a shorter local.socket or --socket"
            )
        }
        var st = stat()
        guard lstat(path, &st) == 0 else {
            if errno == ENOENT {
                return try Self.makeParent(of: path)
            }
            throw BindError(description: "cannot inspect \(path): \(String(cString: strerror(errno)))")
        }
        guard (st.st_mode & S_IFMT) == S_IFSOCK else {
            throw BindError(description: "\(path) exists and is not a socket; remove it or choose another local.socket")
        }
        // Dial first: a daemon that answers keeps its socket.
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw BindError(description: "socket(): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let connected = address.withSockAddr { connect(fd, $0, socklen_t($1)) }
        if connected == 0 {
            throw BindError(description: "another wsbridged is listening on \(path); stop it first, or give this one another --socket")
        }
        guard errno == ECONNREFUSED else {
            throw BindError(description: "cannot check \(path) for a running daemon: \(String(cString: strerror(errno)))")
        }
        guard unlink(path) == 0 else {
            throw BindError(description: "cannot remove the stale socket \(path): \(String(cString: strerror(errno)))")
        }
        return nil
    }

    /// Creates the socket's directory when it is missing (one level, mode 0755) and returns it.
    private static func makeParent(of path: String) throws(BindError) -> String? {
        guard let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return nil }
        let dir = String(path[..<slash])
        var st = stat()
        if stat(dir, &st) == 0 { return nil }
        if mkdir(dir, 0o755) != 0 && errno != EEXIST {
            let problem = String(cString: strerror(errno))
            let code = errno
            let parent = dir.lastIndex(of: "/").map { String(dir[..<$0]) }.flatMap { $0.isEmpty ? "/" : $0 } ?? "."
            throw BindError(description: "cannot create the socket's directory \(dir): \(problem)\(Self.permissionHint(code, dir: parent))")
        }
        return dir
    }

    /// For a permission error: who we are, and what to do instead.
    static func permissionHint(_ code: Int32, dir: String) -> String {
        guard code == EACCES || code == EPERM else { return "" }
        let uid = getuid()
        let user = Self.userName()
        var hint = "; user \(user) may not write in \(dir)"
        if uid != 0 && dir.hasPrefix("/run") {
            let runtime = getenv("XDG_RUNTIME_DIR").map { String(cString: $0) } ?? "/tmp"
            hint +=
                ". Not running as root: pass --socket \(runtime)/wsbridged.sock (and the same --socket to wsbridgectl), or run it under systemd (wsbridged.service has RuntimeDirectory=wsbridged)"
        } else {
            hint += ": choose a writable local.socket or --socket"
        }
        return hint
    }

    /// A bind error, said with the path and what to do.
    static func explain(_ error: any Error, path: String) -> any Error {
        if let io = error as? IOError, io.errnoCode == EACCES || io.errnoCode == EPERM {
            let dir = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
            return BindError(
                description: "cannot create the socket \(path): permission denied\(Self.permissionHint(io.errnoCode, dir: dir.isEmpty ? "/" : dir))")
        }
        if let io = error as? IOError {
            return BindError(description: "cannot create the socket \(path): \(String(cString: strerror(io.errnoCode)))")
        }
        return error
    }

    /// Applies `local.mode` and `local.group` to the bound socket.
    static func applyPermissions(path: String, local: Configuration.Local) throws(BindError) {
        if chmod(path, mode_t(local.mode)) != 0 {
            throw BindError(description: "cannot chmod \(path) to \(String(local.mode, radix: 8)): \(String(cString: strerror(errno)))")
        }
        if let group = local.group {
            guard let gid = PeerCredentials.gid(named: group) else {
                throw BindError(description: "local.group \"\(group)\" does not exist; create it or change local.group")
            }
            if chown(path, uid_t(bitPattern: -1), gid) != 0 {
                let code = errno
                var fix = ""
                if code == EPERM {
                    let user = Self.userName()
                    if Self.isMember(of: gid) {
                        fix =
                            "; user \(user) is in group \(group), so something else refused it: a system call filter that denies chown (systemd's SystemCallFilter=~@privileged without SystemCallFilter=@chown)"
                    } else {
                        fix =
                            "; user \(user) is not a member of group \(group). Under systemd, let wsbridged.socket create the socket (SocketGroup=\(group)), or add SupplementaryGroups=\(group) to the service (systemctl edit wsbridged); by hand, run wsbridged as a member of \(group) or remove local.group"
                    }
                }
                throw BindError(description: "cannot give \(path) to group \(group): \(String(cString: strerror(code)))\(fix)")
            }
        }
    }

    /// This process's user, by name (its uid where it has none), for error messages.
    static func userName() -> String {
        let uid = getuid()
        return getpwuid(uid).flatMap { $0.pointee.pw_name.map { String(cString: $0) } } ?? "uid \(uid)"
    }

    /// Whether this process is in group `gid` (its own group or a supplementary one).
    static func isMember(of gid: gid_t) -> Bool {
        if getegid() == gid { return true }
        let count = getgroups(0, nil)
        guard count > 0 else { return false }
        var groups = [gid_t](repeating: 0, count: Int(count))
        let n = getgroups(count, &groups)
        return n > 0 && groups.prefix(Int(n)).contains(gid)
    }

    /// Binds `path` (or adopts an already-listening socket `fd`) on `eventLoop`.
    static func start(
        path: String,
        adoptingFD fd: Int32? = nil,
        configuration: Configuration,
        eventLoop: any EventLoop,
        plane: NIOLoopBound<LocalPlane>,
        groups: GroupCache,
        logger: Logger
    ) async throws -> any Channel {
        let maxLine = configuration.local.maxLine
        var bootstrap = ServerBootstrap(group: eventLoop)
            .serverChannelOption(.backlog, value: 256)
            // Out of file descriptors, accept(2) fails at once and the listening socket stays
            // readable: pause accepting instead of spinning (logged once).
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        AcceptPauseHandler(
                            failed: { error in plane.value.acceptFailed(error) },
                            recovered: { plane.value.acceptRecovered() }
                        )
                    )
                }
            }
            .childChannelOption(.writeBufferWaterMark, value: .init(low: 64 * 1024, high: 256 * 1024))
            // A client that is done sending (`echo ... | socat`) still gets its replies and messages.
            .childChannelOption(.allowRemoteHalfClosure, value: true)
            .childChannelInitializer { channel in
                let credentials: EventLoopFuture<cwsb_ucred?>
                if let provider = channel as? any SocketOptionProvider {
                    let raw: EventLoopFuture<cwsb_ucred> = provider.unsafeGetSocketOption(
                        level: .socket,
                        name: NIOBSDSocket.Option(rawValue: cwsb_so_peercred())
                    )
                    credentials = raw.map { Optional($0) }.recover { _ in nil }
                } else {
                    credentials = channel.eventLoop.makeSucceededFuture(nil)
                }
                return credentials.flatMap { cred -> EventLoopFuture<(PeerCredentials?, Set<UInt32>)> in
                    // The user's groups come from NSS (sssd, LDAP...): looked up off the loop.
                    guard let peer = cred.flatMap({ PeerCredentials(kernel: $0) }) else {
                        return channel.eventLoop.makeSucceededFuture((nil, []))
                    }
                    // root and the daemon's own user may always write: their groups do not matter.
                    if peer.uid == 0 || peer.uid == getuid() {
                        return channel.eventLoop.makeSucceededFuture((peer, [peer.gid]))
                    }
                    return groups.groups(uid: peer.uid, gid: peer.gid, on: channel.eventLoop).map { (peer, $0) }.recover { _ in (peer, [peer.gid]) }
                }.flatMapThrowing { peer, groups in
                    let client = plane.value.makeClient(credentials: peer, groups: groups)
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(NDJSONLineDecoder(maxLine: maxLine)))
                    try channel.pipeline.syncOperations.addHandler(client)
                }
            }
        // A reader that empties its socket while the loop is busy with an upstream read waits
        // for data; a larger send buffer keeps it reading (0: the system's default, unset).
        if configuration.local.sendBufferBytes > 0 {
            bootstrap = bootstrap.childChannelOption(.socketOption(.so_sndbuf), value: SocketOptionValue(configuration.local.sendBufferBytes))
        }
        if let fd {
            return try await bootstrap.withBoundSocket(fd).get()
        }
        if let created = try Self.prepare(path: path) {
            logger.notice(
                "created the socket's directory \(created) (mode 0755; it stays after exit)", metadata: ["local.socket_directory": "\(created)"])
        }
        let channel: any Channel
        do {
            channel = try await bootstrap.bind(unixDomainSocketPath: path).get()
        } catch {
            throw Self.explain(error, path: path)
        }
        try Self.applyPermissions(path: path, local: configuration.local)
        logger.notice("listening on \(path)", metadata: ["local.socket": "\(path)"])
        return channel
    }
}
