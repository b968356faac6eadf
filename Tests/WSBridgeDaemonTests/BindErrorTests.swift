import Glibc
import Testing

@testable import WSBridgeDaemon

/// Every way the local socket can fail to come up says what was wrong and how to fix it.
@Suite struct BindErrorTests {
    static let path = "/run/wsbridged/wsbridged.sock"

    /// Each case that carries an errno, for errnos it can meet.
    static func everyErrnoCase(_ code: Int32) -> [LocalServer.BindError] {
        let error = SystemError(code: code)
        return [
            .cannotInspect(path: Self.path, error), .socketCall(error), .cannotCheck(path: Self.path, error),
            .cannotRemoveStale(path: Self.path, error), .cannotCreateDirectory(directory: "/run/wsbridged", error),
            .cannotCreateSocket(path: Self.path, directory: "/run/wsbridged", error), .cannotChmod(path: Self.path, mode: 0o660, error),
        ]
    }

    @Test(arguments: [EACCES, EPERM, EROFS, EMFILE, ENFILE, ENOSPC, ENOTDIR, ELOOP, ENOENT, ENOMEM, EAFNOSUPPORT, EAGAIN, EIO])
    func noTextEndsAtTheErrno(_ code: Int32) {
        let errno = String(cString: strerror(code))
        for error in Self.everyErrnoCase(code) {
            #expect(!error.description.hasSuffix(errno), "no way out after the errno: \(error)")
        }
    }

    @Test func theFixFitsTheErrno() {
        #expect(LocalServer.BindError.socketCall(SystemError(code: EMFILE)).description.contains("raise LimitNOFILE="))
        #expect(
            LocalServer.BindError.cannotRemoveStale(path: Self.path, SystemError(code: EROFS)).description.contains(
                "/run/wsbridged is on a read-only file system: choose a local.socket or --socket on a writable one"))
        #expect(LocalServer.BindError.cannotCheck(path: Self.path, SystemError(code: EAGAIN)).description.contains("one may be running and busy"))
        #expect(
            LocalServer.BindError.cannotChmod(path: Self.path, mode: 0o660, SystemError(code: ENOSPC)).description.contains(
                "cannot chmod \(Self.path) to 660 (local.mode)"))
        #expect(LocalServer.directory(of: "/x.sock") == "/" && LocalServer.directory(of: "x.sock") == "." && LocalServer.directory(of: "/a/b/x.sock") == "/a/b")
    }
}
