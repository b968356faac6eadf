import CWSBridgeLinux
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
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
    /// `groups`: the peer user's groups (`groups(uid:primary:)`, looked up off the event loop).
    func mayWrite(_ policy: AccessPolicy, groups: Set<UInt32>) -> Bool {
        if self.uid == 0 || self.uid == getuid() || policy.writeUIDs.contains(self.uid) { return true }
        return !policy.writeGIDs.isDisjoint(with: groups)
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

    /// The user's primary and supplementary groups. Blocking (NSS: files, sssd, LDAP): call it
    /// off the event loop, through `GroupCache`.
    /// nil when the lookup itself failed (out of descriptors, say): not an answer to keep.
    static func groups(uid: uid_t, primary: gid_t) -> Set<gid_t>? {
        var result: Set<gid_t> = [primary]
        var passwd = passwd()
        var entry: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16384)
        guard getpwuid_r(uid, &passwd, &buffer, buffer.count, &entry) == 0 else { return nil }
        // A user NSS does not know has only its primary group.
        guard entry != nil, let name = passwd.pw_name else { return result }
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

/// `access.*` with group names resolved to ids. Resolving asks NSS (blocking), so it is done off
/// the event loop: at start and at each reload.
struct AccessPolicy: Sendable, Equatable {
    var writeUIDs: Set<UInt32>
    var writeGIDs: Set<UInt32>

    init(writeUIDs: Set<UInt32> = [], writeGIDs: Set<UInt32> = []) {
        self.writeUIDs = writeUIDs
        self.writeGIDs = writeGIDs
    }

    /// Group names that do not exist are left out (and logged by the caller).
    static func resolve(_ access: Configuration.Access) -> (policy: AccessPolicy, unknownGroups: [String]) {
        var gids: Set<UInt32> = []
        var unknown: [String] = []
        for name in access.writeGroups {
            if let gid = PeerCredentials.gid(named: name) { gids.insert(gid) } else { unknown.append(name) }
        }
        return (AccessPolicy(writeUIDs: Set(access.writeUIDs), writeGIDs: gids), unknown)
    }
}

/// Each peer user's groups, looked up on a thread pool (never on the event loop) and kept for
/// `lifetime`, at most `capacity` users: a burst of connections from one user costs one lookup,
/// and a changed group membership is seen within the lifetime.
final class GroupCache: Sendable {
    private struct Entry {
        var groups: Set<UInt32>
        var expires: NIODeadline
    }

    private let entries = NIOLockedValueBox<[UInt64: Entry]>([:])
    private let lookupCount = NIOLockedValueBox(0)
    private let lifetime: TimeAmount
    private let capacity: Int
    private let pool: NIOThreadPool

    init(lifetime: TimeAmount = .seconds(60), capacity: Int = 1024, pool: NIOThreadPool = .singleton) {
        self.lifetime = lifetime
        self.capacity = capacity
        self.pool = pool
    }

    /// How many NSS lookups were made (tests check the cache with it).
    var lookups: Int { self.lookupCount.withLockedValue { $0 } }

    /// The groups of `uid` (primary `gid`), from the cache or a lookup off the loop.
    func groups(uid: UInt32, gid: UInt32, on eventLoop: any EventLoop) -> EventLoopFuture<Set<UInt32>> {
        let key = UInt64(uid) << 32 | UInt64(gid)
        let now = NIODeadline.now()
        if let hit = self.entries.withLockedValue({ $0[key] }), hit.expires > now {
            return eventLoop.makeSucceededFuture(hit.groups)
        }
        let lifetime = self.lifetime
        let capacity = self.capacity
        return self.pool.runIfActive(eventLoop: eventLoop) {
            self.lookupCount.withLockedValue { $0 += 1 }
            // A failed lookup is not cached: the primary group serves this once.
            guard let groups = PeerCredentials.groups(uid: uid, primary: gid) else { return [gid] }
            self.entries.withLockedValue { entries in
                if entries.count >= capacity {
                    let now = NIODeadline.now()
                    entries = entries.filter { $0.value.expires > now }
                    if entries.count >= capacity { entries.removeAll() }
                }
                entries[key] = Entry(groups: groups, expires: .now() + lifetime)
            }
            return groups
        }
    }
}
