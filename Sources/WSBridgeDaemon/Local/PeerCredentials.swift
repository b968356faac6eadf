import CWSBridgeLinux
import WSBridgeCore

#if canImport(Glibc)
import Glibc
#endif

/// Who is on the other end of a Unix socket (SO_PEERCRED), and what they may do.
struct PeerCredentials: Sendable, Equatable {
    var pid: Int32
    var uid: UInt32
    var gid: UInt32

    /// What SO_PEERCRED returned, or nil when it cannot be trusted. NIO zero-fills the buffer
    /// and does not report the returned length, so an untouched buffer would read as pid 0,
    /// uid 0: root. A real peer always has a pid (the kernel reports 0 only for a peer in a PID
    /// namespace this daemon cannot see), so a pid of 0 fails closed: the client is read-only.
    init?(kernel raw: cwsb_ucred) {
        guard raw.pid > 0 else { return nil }
        self.init(pid: raw.pid, uid: raw.uid, gid: raw.gid)
    }

    init(pid: Int32, uid: UInt32, gid: UInt32) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
    }

    /// root, the daemon's own user, `access.write_uids`, or a member of `access.write_groups`.
    func mayWrite(_ access: Configuration.Access) -> Bool {
        if self.uid == 0 || self.uid == getuid() || access.writeUIDs.contains(self.uid) { return true }
        guard !access.writeGroups.isEmpty else { return false }
        let groups = Self.groups(uid: self.uid, primary: self.gid)
        for name in access.writeGroups {
            if let gid = Self.gid(named: name), groups.contains(gid) { return true }
        }
        return false
    }

    static func gid(named name: String) -> gid_t? {
        var group = group()
        var result: UnsafeMutablePointer<group>?
        var buffer = [CChar](repeating: 0, count: 16384)
        guard getgrnam_r(name, &group, &buffer, buffer.count, &result) == 0, result != nil else {
            return UInt32(name)
        }
        return group.gr_gid
    }

    /// The user's primary and supplementary groups.
    static func groups(uid: uid_t, primary: gid_t) -> Set<gid_t> {
        var result: Set<gid_t> = [primary]
        var passwd = passwd()
        var entry: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16384)
        guard getpwuid_r(uid, &passwd, &buffer, buffer.count, &entry) == 0, entry != nil, let name = passwd.pw_name else {
            return result
        }
        var count: Int32 = 64
        var list = [gid_t](repeating: 0, count: Int(count))
        if getgrouplist(name, primary, &list, &count) == -1 {
            list = [gid_t](repeating: 0, count: Int(count))
            _ = getgrouplist(name, primary, &list, &count)
        }
        result.formUnion(list.prefix(Int(max(count, 0))))
        return result
    }
}
