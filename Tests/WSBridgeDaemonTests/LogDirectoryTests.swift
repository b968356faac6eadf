import Foundation
import Glibc
import Testing

@testable import WSBridgeDaemon

/// A durable log's directory lock (`DIR/lock`, flock).
@Suite struct LogDirectoryTests {
    /// The descriptors of this process open on `path` (from /proc/self/fd).
    static func descriptors(of path: String) -> [CInt] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return entries.compactMap { name in
            guard let fd = CInt(name), let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(name)") else { return nil }
            return target == path ? fd : nil
        }
    }

    /// A process forked while the log is open shares the lock's open file description until
    /// its exec (a `dup` of the descriptor is the same thing, in this process): after the log
    /// lets go, it can be locked again at once, whatever still holds the description.
    @Test func aLetGoLockIsFreeThoughAForkedChildStillSharesItsDescriptor() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("wsbridge-lock-\(UUID().uuidString.prefix(8))").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var first = try LogDirectory.lock(dir, .spool)
        let held = try #require(Self.descriptors(of: dir + "/lock").first)
        let shared = dup(held)
        #expect(shared >= 0)
        defer { close(shared) }
        // A second daemon is kept off while it is held.
        #expect(throws: LogFailure.self) { _ = try LogDirectory.lock(dir, .spool) }
        first.unlock()
        var again = try LogDirectory.lock(dir, .spool)
        again.unlock()
    }
}
