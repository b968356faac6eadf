import CWSBridgeLinux
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing
import WSBridgeCore

@testable import WSBridgeDaemon

/// The spool itself on a real file: order across reopening, compaction, and the lock.
@Suite struct SpoolFileTests {
    static func open(_ dir: String, _ loop: any EventLoop, fsync: Configuration.FsyncPolicy = .always) throws -> (Spool, Spool.Restored) {
        try Spool.open(directory: dir, fsync: fsync, eventLoop: loop, logger: Logger(label: "test"))
    }

    /// Appends and waits until the spool reports the entry stored.
    static func store(_ spool: Spool, _ entry: Spool.Entry) async throws {
        let outcome: Spool.Failure?? = await withCheckedContinuation { continuation in
            let once = NIOLockedValueBox<CheckedContinuation<Spool.Failure??, Never>?>(continuation)
            spool.whenStored { stored in
                guard stored.through >= entry.id,
                    let c = once.withLockedValue({ c in
                        defer { c = nil }
                        return c
                    })
                else { return }
                c.resume(returning: .some(stored.failure))
            }
            spool.append(entry)
        }
        if case .some(.some(let failure)) = outcome { throw failure }
    }

    static func size(_ path: String) -> Int {
        (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? -1
    }

    @Test(arguments: [Configuration.FsyncPolicy.always, .batch])
    func appendsSurviveReopeningAndDeliveredOnesLeave(fsync: Configuration.FsyncPolicy) async throws {
        let dir = try TemporaryDirectory()
        let spoolDir = dir.file("spool")
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        var (spool, restored) = try Self.open(spoolDir, loop, fsync: fsync)
        #expect(restored.entries.isEmpty)
        for id in UInt64(1)...50 {
            try await Self.store(spool, .init(id: id, kind: id % 2 == 0 ? .binary : .text, data: ByteBuffer(string: "m\(id)")))
        }
        spool.delivered(through: 20)
        try await spool.close().get()
        (spool, restored) = try Self.open(spoolDir, loop, fsync: fsync)
        #expect(restored.entries.map { String(buffer: $0.data) } == (21...50).map { "m\($0)" })
        #expect(restored.entries.map(\.kind) == (21...50).map { $0 % 2 == 0 ? .binary : .text })
        #expect(restored.lastID == 50)
        // Opening rewrote the file with the live records only.
        #expect(Self.size(spoolDir + "/outbound.log") == 16 + 30 * 17 + (21...50).map { "m\($0)".utf8.count }.reduce(0, +))
        // Everything delivered: the file is cut back to its header.
        spool.delivered(through: 50)
        try await spool.close().get()
        #expect(Self.size(spoolDir + "/outbound.log") == 16)
        (spool, restored) = try Self.open(spoolDir, loop, fsync: fsync)
        #expect(restored.entries.isEmpty)
        try await spool.close().get()
    }

    @Test func deadRecordsAreCompactedAwayWhileSomeStayLive() async throws {
        let dir = try TemporaryDirectory()
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let (spool, _) = try Self.open(dir.file("spool"), loop, fsync: .batch)
        let payload = ByteBuffer(repeating: 0x61, count: 64 * 1024)
        // 40 MiB through the spool with at most two messages live: without compaction the file
        // would hold all of it.
        var maxSize = 0
        for id in UInt64(1)...640 {
            try await Self.store(spool, .init(id: id, kind: .text, data: payload))
            if id > 1 { spool.delivered(through: id - 1) }
            maxSize = max(maxSize, spool.fileStatistics.bytes)
        }
        try await spool.close().get()
        #expect(maxSize < 3 * SpoolLedger.compactionSlack)
        let (again, restored) = try Self.open(dir.file("spool"), loop)
        #expect(restored.entries.map(\.id) == [640])
        try await again.close().get()
    }

    @Test func aSecondDaemonCannotOpenTheSameSpool() async throws {
        let dir = try TemporaryDirectory()
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let (spool, _) = try Self.open(dir.file("spool"), loop)
        do {
            _ = try Self.open(dir.file("spool"), loop)
            Issue.record("a second open succeeded")
        } catch {
            #expect("\(error)".contains("in use by another wsbridged"))
        }
        try await spool.close().get()
        // Closed: the lock is free again.
        let (again, _) = try Self.open(dir.file("spool"), loop)
        try await again.close().get()
    }

    @Test func anUnwritableSpoolDirectoryIsNamedWithTheFix() throws {
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        do {
            _ = try Self.open("/proc/wsbridge-spool", loop)
            Issue.record("opened a spool under /proc")
        } catch {
            #expect("\(error)".contains("cannot create the spool directory /proc/wsbridge-spool (queue.spool)"))
        }
    }
}
