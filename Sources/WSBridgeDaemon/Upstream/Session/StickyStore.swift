import ExtrasBase64
import NIOCore
import NIOPosix
import WSBridgeCore
import WSBridgeProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// Keeps the daemon-scope sticky keys in `sticky.json` beside the spool (`queue.spool`), so
/// they survive a restart, a crash and `kill -9`: a snapshot on the spool's durable log. The
/// whole file is replaced on every change (`DurableFile.replace`): a crash leaves the old file
/// or the new one, never a mix. The spool's writer thread writes it, in the order the changes
/// were asked for; the event loop never waits for the disk.
final class StickyStore: Sendable {
    let path: String
    private let spool: Spool

    private init(path: String, spool: Spool) {
        self.path = path
        self.spool = spool
    }

    typealias Failure = LogFailure

    /// Opens the store in the spool's directory (which the spool created and locked) and reads
    /// what an earlier run kept. Blocking: call off the event loop.
    static func open(spool: Spool) throws(Failure) -> (StickyStore, [StickyRegistry.Entry]) {
        let path = spool.directory + "/sticky.json"
        guard access(path, F_OK) == 0 || errno != ENOENT else { return (StickyStore(path: path, spool: spool), []) }
        let bytes: [UInt8]
        switch SmallFile.read(path: path, limit: 1 << 30) {
        case .success(let b):
            bytes = b
        case .failure(let problem):
            throw .stickyUnreadable(path: path, problem: "\(problem)")
        }
        do {
            return (StickyStore(path: path, spool: spool), try Self.decode(bytes))
        } catch {
            throw .stickyDamaged(path: path, problem: "\(error)")
        }
    }

    /// Replaces the file with `file` (from `encode`); the future succeeds once it is on disk.
    func save(_ file: ByteBuffer) -> EventLoopFuture<Void> {
        self.spool.saveSnapshot(file, to: self.path)
    }

    // MARK: - The file

    /// `sticky.json`: its keys written once, here (`JSONValueCoding` writes and reads them).
    private struct File: Codable {
        var version: Int
        var keys: [Key]
    }

    private struct Key: Codable {
        var key: String
        @OmitNil var text: String?
        /// A binary payload, in base64.
        @OmitNil var binary: String?
        @OmitNil var onUnstick: String?
        /// The process that registered the key, when known.
        @OmitNil var pid: Int32?
        @OmitNil var uid: UInt32?
        /// When the daemon took its hold, ms since the Unix epoch.
        var since: Int64
    }

    static func encode(_ entries: [StickyRegistry.Entry]) -> ByteBuffer {
        let keys = entries.map { e in
            let hold = e.holds.first { $0.holder == .daemon }
            var key = Key(key: e.key, onUnstick: e.onUnstick, pid: hold?.pid, uid: hold?.uid, since: hold?.sinceMillis ?? e.sinceMillis)
            switch e.payload {
            case .text(let t): key.text = t
            case .binary(let b): key.binary = Base64.encodeToString(bytes: b)
            }
            return key
        }
        return ByteBuffer(string: JSONValueCoding.encode(File(version: 1, keys: keys)).serialized + "\n")
    }

    /// What makes the file not one this daemon wrote.
    enum DecodeError: Error, CustomStringConvertible {
        case version
        case keyWithoutName
        case keyWithoutPayload(key: String)

        var description: String {
            switch self {
            case .version: "not version 1 of the sticky file"
            case .keyWithoutName: "a key without \"key\""
            case .keyWithoutPayload(let key): "key \"\(key)\" has neither text nor binary"
            }
        }
    }

    static func decode(_ bytes: [UInt8]) throws -> [StickyRegistry.Entry] {
        let file = try JSONValueCoding.decode(File.self, from: try JSONValue.parse(bytes))
        guard file.version == 1 else { throw DecodeError.version }
        return try file.keys.map { k in
            guard !k.key.isEmpty else { throw DecodeError.keyWithoutName }
            let payload: Payload
            if let t = k.text {
                payload = .text(t)
            } else if let b = k.binary {
                payload = .binary(try Base64.decode(string: b))
            } else {
                throw DecodeError.keyWithoutPayload(key: k.key)
            }
            return .restored(key: k.key, payload: payload, onUnstick: k.onUnstick, pid: k.pid, uid: k.uid, sinceMillis: k.since)
        }
    }
}
