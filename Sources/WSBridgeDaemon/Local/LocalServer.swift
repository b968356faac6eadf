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
    /// Why the socket could not be made ready, and how to fix it: every text is here.
    enum BindError: Error, CustomStringConvertible {
        case pathTooLong(path: String)
        case cannotInspect(path: String, SystemError)
        case notASocket(path: String)
        case socketCall(SystemError)
        /// A daemon answers on the path.
        case inUse(path: String)
        case cannotCheck(path: String, SystemError)
        case cannotRemoveStale(path: String, SystemError)
        case cannotCreateDirectory(directory: String, SystemError)
        /// bind(2) failed (`directory`: where the socket goes).
        case cannotCreateSocket(path: String, directory: String, SystemError)
        case cannotChmod(path: String, mode: Int, SystemError)
        case noSuchGroup(String)
        /// `member`: whether this process's user is in the group (then something else refused).
        case cannotChown(path: String, group: String, member: Bool, SystemError)

        var description: String {
            switch self {
            case .pathTooLong(let path):
                "the socket path \(path) is \(path.utf8.count) bytes; a Unix socket path holds at most 107 (108 with its terminating NUL): choose a shorter local.socket or --socket"
            case .cannotInspect(let path, let error): "cannot inspect \(path): \(error)\(LocalServer.fix(error, path: path, needing: .search))"
            case .notASocket(let path): "\(path) exists and is not a socket; remove it or choose another local.socket"
            case .socketCall(let error): "cannot make a Unix socket (socket(2)): \(error)\(LocalServer.fix(error, path: nil))"
            case .inUse(let path): "another wsbridged is listening on \(path); stop it first, or give this one another --socket"
            case .cannotCheck(let path, let error) where error.code == EAGAIN:
                "cannot check \(path) for a running daemon: it accepts no more connections now, so one may be running and busy; stop it first, or give this one another --socket"
            case .cannotCheck(let path, let error) where error.code == EACCES || error.code == EPERM:
                "cannot check \(path) for a running daemon: \(error); user \(LocalServer.userName()) may not connect to it (another user's socket): remove it as its owner if no wsbridged uses it, or give this one another --socket"
            case .cannotCheck(let path, let error): "cannot check \(path) for a running daemon: \(error)\(LocalServer.fix(error, path: path))"
            case .cannotRemoveStale(let path, let error):
                "cannot remove the stale socket \(path) (no daemon answers on it): \(error)\(LocalServer.fix(error, path: path))"
            case .cannotCreateDirectory(let directory, let error):
                "cannot create the socket's directory \(directory): \(error)\(LocalServer.fix(error, path: directory))"
            case .cannotCreateSocket(let path, let directory, let error) where error.code == EACCES || error.code == EPERM:
                "cannot create the socket \(path): permission denied\(LocalServer.permissionHint(error.code, dir: directory))"
            case .cannotCreateSocket(let path, _, let error): "cannot create the socket \(path): \(error)\(LocalServer.fix(error, path: path))"
            case .cannotChmod(let path, let mode, let error):
                "cannot chmod \(path) to \(String(mode, radix: 8)) (local.mode): \(error)\(LocalServer.fix(error, path: path))"
            case .noSuchGroup(let group): "local.group \"\(group)\" does not exist; create it or change local.group"
            case .cannotChown(let path, let group, let member, let error):
                "cannot give \(path) to group \(group): \(error)" + (error.code == EPERM ? Self.chownFix(group: group, member: member) : "")
            }
        }

        private static func chownFix(group: String, member: Bool) -> String {
            let user = LocalServer.userName()
            return member
                ? "; user \(user) is in group \(group), so something else refused it: a system call filter that denies chown (systemd's SystemCallFilter=~@privileged without SystemCallFilter=@chown)"
                : "; user \(user) is not a member of group \(group). Under systemd, let wsbridged.socket create the socket (SocketGroup=\(group)), or add SupplementaryGroups=\(group) to the service (systemctl edit wsbridged); by hand, run wsbridged as a member of \(group) or remove local.group"
        }
    }

    /// Makes `path` free to bind: a live daemon there is an error; a dead socket file is removed; a
    /// missing directory is created (one level) and returned, for the log.
    @discardableResult
    static func prepare(path: String) throws(BindError) -> String? {
        let address: SocketAddress
        do {
            address = try SocketAddress(unixDomainSocketPath: path)
        } catch {
            throw .pathTooLong(path: path)
        }
        var st = stat()
        guard lstat(path, &st) == 0 else {
            if errno == ENOENT {
                return try Self.makeParent(of: path)
            }
            throw .cannotInspect(path: path, .last)
        }
        guard (st.st_mode & S_IFMT) == S_IFSOCK else {
            throw .notASocket(path: path)
        }
        // Dial first: a daemon that answers keeps its socket.
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw .socketCall(.last) }
        defer { close(fd) }
        let connected = address.withSockAddr { connect(fd, $0, socklen_t($1)) }
        if connected == 0 {
            throw .inUse(path: path)
        }
        guard errno == ECONNREFUSED else {
            throw .cannotCheck(path: path, .last)
        }
        guard unlink(path) == 0 else {
            throw .cannotRemoveStale(path: path, .last)
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
            throw .cannotCreateDirectory(directory: dir, .last)
        }
        return dir
    }

    /// What a step needs of the directories of the socket's path.
    enum Access {
        /// To make or remove a file in its directory.
        case write
        /// To look it up (each directory on the way).
        case search
    }

    /// What to do about `error` on `path` (nil: not about a path, as socket(2)), after "; ".
    static func fix(_ error: SystemError, path: String?, needing access: Access = .write) -> String {
        let dir = path.map(Self.directory(of:)) ?? "/"
        switch error.code {
        case EACCES, EPERM:
            guard let path else { return "; a system call filter or security module denies Unix sockets to wsbridged" }
            switch access {
            case .write: return Self.permissionHint(error.code, dir: dir)
            case .search:
                return "; user \(Self.userName()) may not search a directory on the way to \(path): give it access, or choose another local.socket or --socket"
            }
        case EROFS:
            return
                "; \(dir) is on a read-only file system: choose a local.socket or --socket on a writable one (under systemd, wsbridged.service's RuntimeDirectory= makes /run/wsbridged)"
        case EMFILE, ENFILE:
            return "; out of file descriptors: raise LimitNOFILE= (systemctl edit wsbridged) or the shell's ulimit -n"
        case ENOSPC, EDQUOT:
            return "; the file system of \(dir) is full: free some space, or choose a local.socket on another one"
        case ENOENT, ENOTDIR, ELOOP:
            return "; a part of \(path ?? dir) is missing, not a directory, or links in a loop: check local.socket or --socket"
        case ENOMEM, ENOBUFS:
            return "; the system is short of memory: free some and start wsbridged again"
        case EAFNOSUPPORT, EPROTONOSUPPORT:
            return "; this system offers no Unix sockets to wsbridged (a container or a system call filter without AF_UNIX)"
        default:
            return "; check that local.socket (or --socket) is a path in a directory wsbridged's user may write in, or choose another"
        }
    }

    /// The directory a path is in ("/" for a top-level one, "." for a bare name).
    static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
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
        guard let io = error as? IOError else { return error }
        return BindError.cannotCreateSocket(path: path, directory: Self.directory(of: path), SystemError(code: io.errnoCode))
    }

    /// Applies `local.mode` and `local.group` to the bound socket.
    static func applyPermissions(path: String, local: Configuration.Local) throws(BindError) {
        if chmod(path, mode_t(local.mode)) != 0 {
            throw .cannotChmod(path: path, mode: Int(local.mode), .last)
        }
        if let group = local.group {
            guard let gid = PeerCredentials.gid(named: group) else {
                throw .noSuchGroup(group)
            }
            if chown(path, uid_t(bitPattern: -1), gid) != 0 {
                let error = SystemError.last
                throw .cannotChown(path: path, group: group, member: Self.isMember(of: gid), error)
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
            .serverChannelInitializer(Self.pausingAccepts(plane))
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
        // for data; a larger send buffer keeps it reading (0: the system's default, unset). A
        // client has the small one until it reads fast (`ClientSendBuffer`).
        let sendBuffer = ClientSendBuffer.initial(configuration.local)
        if sendBuffer > 0 {
            bootstrap = bootstrap.childChannelOption(.socketOption(.so_sndbuf), value: SocketOptionValue(sendBuffer))
        }
        if let fd {
            return try await bootstrap.withBoundSocket(fd).get()
        }
        let channel = try await Self.bind(bootstrap, path: path, local: configuration.local, logger: logger)
        logger.notice("listening on \(path)", metadata: ["local.socket": "\(path)"])
        return channel
    }

    /// Binds `path` for either face: a stale socket replaced (never a live daemon's), a missing
    /// directory made (and logged), the error said with the path, `local.mode` and `local.group`
    /// applied.
    static func bind(_ bootstrap: ServerBootstrap, path: String, local: Configuration.Local, logger: Logger) async throws -> any Channel {
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
        try Self.applyPermissions(path: path, local: local)
        return channel
    }

    /// A listening socket's initializer for either face: out of file descriptors, accept(2) fails
    /// at once and the socket stays readable, so accepting pauses instead of spinning (logged
    /// once, by the plane).
    static func pausingAccepts(_ plane: NIOLoopBound<LocalPlane>) -> @Sendable (any Channel) -> EventLoopFuture<Void> {
        { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(
                    AcceptPauseHandler(failed: { error in plane.value.acceptFailed(error) }, recovered: { plane.value.acceptRecovered() }))
            }
        }
    }
}
