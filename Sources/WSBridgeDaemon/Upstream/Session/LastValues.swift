import CWSBridgeLinux
import NIOCore
import WSBridgeProtocol

/// The last value of each `${last:PATH}` field seen in upstream text messages, as JSON text
/// exactly as received (numbers keep their digits).
///
/// Cheap per message: a message is only remembered (a reference to its buffer, no copy) when it
/// contains the path's last key in quotes; once per socket read (`resolve`), the newest such
/// message that really has the path is parsed. A read with very many candidates, or very large
/// ones (a deflated upstream can inflate one read into many MiB), is resolved early: what is
/// held stays bounded and the answer stays exact.
struct LastValues {
    private let paths: [(path: String, components: [JSONValue.PathComponent], needle: [UInt8])]
    private var candidates: [ByteBuffer] = []
    private var candidateBytes = 0
    private(set) var values: [String: String] = [:]
    static let maxCandidates = 256
    static let maxCandidateBytes = 1 << 20

    init(paths: [String]) {
        var seen = Set<String>()
        self.paths = paths.filter { seen.insert($0).inserted }.map { path in
            let components = JSONValue.PathComponent.split(path)
            let last = components.last?.key ?? path
            return (path, components, Array("\"\(last)\"".utf8))
        }
    }

    var isEmpty: Bool { self.paths.isEmpty }

    /// Keeps earlier values of the paths still watched (after a reload).
    mutating func keep(_ earlier: [String: String]) {
        for p in self.paths { if let v = earlier[p.path] { self.values[p.path] = v } }
    }

    mutating func observe(_ data: ByteBuffer) {
        let hit = data.withUnsafeReadableBytes { bytes in
            self.paths.contains { p in p.needle.withUnsafeBytes { n in cwsb_contains(bytes.baseAddress, bytes.count, n.baseAddress, n.count) != 0 } }
        }
        guard hit else { return }
        self.candidates.append(data)
        self.candidateBytes += data.readableBytes
        if self.candidates.count >= Self.maxCandidates || self.candidateBytes >= Self.maxCandidateBytes { self.resolve() }
    }

    /// Settles the values from the remembered messages, newest first.
    mutating func resolve() {
        guard !self.candidates.isEmpty else { return }
        var open = Set(self.paths.indices)
        for data in self.candidates.reversed() where !open.isEmpty {
            guard let json = try? JSONValue.parse(data.readableBytesView) else { continue }
            for i in open {
                if let value = json.value(at: self.paths[i].components) {
                    self.values[self.paths[i].path] = value.serialized
                    open.remove(i)
                }
            }
        }
        self.candidates.removeAll(keepingCapacity: true)
        self.candidateBytes = 0
    }
}
