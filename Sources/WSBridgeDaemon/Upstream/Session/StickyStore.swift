import ExtrasBase64
import NIOCore
import NIOPosix
import WSBridgeCore
import WSBridgeProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// Keeps the daemon-scope sticky keys in `sticky.json` beside the spool (`queue.spool`), so
/// they survive a restart, a crash and `kill -9`. The whole file is replaced on every change
/// (`DurableFile.replace`): a crash leaves the old file or the new one, never a mix. The writes
/// run on a thread of their own, in the order they were asked for; the event loop never waits
/// for the disk.
final class StickyStore: Sendable {
    let path: String
    private let pool: NIOThreadPool

    private init(path: String) {
        self.path = path
        self.pool = NIOThreadPool(numberOfThreads: 1)
        self.pool.start()
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Opens the store in `directory` (which the spool created and locked) and reads what an
    /// earlier run kept. Blocking: call off the event loop.
    static func open(directory: String) throws(Failure) -> (StickyStore, [StickyRegistry.Entry]) {
        let path = directory + "/sticky.json"
        guard access(path, F_OK) == 0 || errno != ENOENT else { return (StickyStore(path: path), []) }
        let bytes: [UInt8]
        switch SmallFile.read(path: path, limit: 1 << 30) {
        case .success(let b):
            bytes = b
        case .failure(let problem):
            throw Failure(description: "cannot read \(path): \(problem); make it readable for the daemon's user, or move it away to start without its keys")
        }
        do {
            return (StickyStore(path: path), try Self.decode(bytes))
        } catch {
            throw Failure(description: "\(path) is damaged (\(error)): move it away to start without the daemon-scope sticky keys it held")
        }
    }

    /// Replaces the file with `file` (from `encode`); the future succeeds once it is on disk.
    func save(_ file: ByteBuffer, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        let path = self.path
        return self.pool.runIfActive(eventLoop: eventLoop) { () throws -> Void in
            Glibc.close(try DurableFile.replace(path, with: file))
        }
    }

    func close() {
        self.pool.shutdownGracefully { _ in }
    }

    // MARK: - The file

    static func encode(_ entries: [StickyRegistry.Entry]) -> ByteBuffer {
        let keys: [JSONValue] = entries.map { e in
            let hold = e.holds.first { $0.holder == .daemon }
            var fields: [(String, JSONValue)] = [("key", .string(e.key))]
            switch e.payload {
            case .text(let t): fields.append(("text", .string(t)))
            case .binary(let b): fields.append(("binary", .string(Base64.encodeToString(bytes: b))))
            }
            if let leave = e.onUnstick { fields.append(("on_unstick", .string(leave))) }
            if let pid = hold?.pid { fields.append(("pid", .number(JSONNumber(pid)))) }
            if let uid = hold?.uid { fields.append(("uid", .number(JSONNumber(uid)))) }
            fields.append(("since", .number(JSONNumber(hold?.sinceMillis ?? e.sinceMillis))))
            return .object(fields)
        }
        let root: JSONValue = ["version": 1, "keys": .array(keys)]
        return ByteBuffer(string: root.serialized + "\n")
    }

    struct DecodeError: Error, CustomStringConvertible {
        var description: String
    }

    static func decode(_ bytes: [UInt8]) throws -> [StickyRegistry.Entry] {
        let root = try JSONValue.parse(bytes)
        guard root["version"]?.intValue == 1 else { throw DecodeError(description: "not version 1 of the sticky file") }
        guard case .array(let keys)? = root["keys"] else { throw DecodeError(description: "no \"keys\" list") }
        return try keys.map { k in
            guard let key = k["key"]?.stringValue else { throw DecodeError(description: "a key without \"key\"") }
            let payload: Payload
            if let t = k["text"]?.stringValue {
                payload = .text(t)
            } else if let b = k["binary"]?.stringValue {
                payload = .binary(try Base64.decode(string: b))
            } else {
                throw DecodeError(description: "key \"\(key)\" has neither text nor binary")
            }
            return .restored(
                key: key, payload: payload, onUnstick: k["on_unstick"]?.stringValue, pid: k["pid"]?.intValue.map { Int32(clamping: $0) },
                uid: k["uid"]?.uint64Value.map { UInt32(clamping: $0) }, sinceMillis: Int64(k["since"]?.intValue ?? 0))
        }
    }
}
