#if DEBUG || FUZZING
    import WSBridgeCore

    /// A message of the fleet's stream that says it is a batch (`fleet.batch`, docs/fleet.md):
    /// what a follower takes apart on the NATS client's thread. The first two bytes are the count
    /// its `Wsbridge-Batch` header says (big-endian), the rest its bytes. Nothing crashes; what is
    /// taken apart is in bounds, one message after another, and written again it is the same
    /// bytes; what is not says why.
    enum BatchTarget {
        static func run(_ bytes: [UInt8]) {
            guard bytes.count >= 2 else { return }
            let count = Int(bytes[0]) << 8 | Int(bytes[1])
            let body = Array(bytes.dropFirst(2))
            let items: [FleetBatch.Item]
            do {
                items = try body.withUnsafeBytes { try FleetBatch.items(of: $0, count: count) }
            } catch let error as FleetBatch.Malformed {
                guard !error.description.isEmpty else { fatalError("a batch refused without a reason") }
                return
            } catch {
                fatalError("a batch refused with \(error)")
            }
            guard items.count == count else { fatalError("\(items.count) messages taken from a batch of \(count)") }
            var again: [UInt8] = []
            var end = 0
            for item in items {
                guard item.range.lowerBound == end + FleetBatch.overhead, item.range.upperBound <= body.count else {
                    fatalError("a message at \(item.range) after one ending at \(end), in \(body.count) bytes")
                }
                end = item.range.upperBound
                body[item.range].withUnsafeBytes { FleetBatch.append(binary: item.binary, $0, to: &again) }
            }
            guard again == body else { fatalError("a batch taken apart and written again differs from its bytes") }
        }
    }
#endif
