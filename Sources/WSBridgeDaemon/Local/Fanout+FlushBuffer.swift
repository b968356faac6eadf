/// The size a flush's buffer starts at: what the fan-out's lines of one socket read are written into.
extension Fanout {
    /// A flush's buffer starts at the size of the last one and a quarter, up to this: a steady
    /// feed's reads, which vary a little, fit without regrowth, and the line that ends one finds
    /// room for its escapes.
    static let maxStartCapacity = 1 << 20

    /// The capacity asked for a flush after one of `last` bytes. NIO rounds it up to a power of
    /// 2, and `flush` copies a buffer more than half unused: where the quarter more would round
    /// up past twice `last` (`last` just under a power of 2), a flush of the same size would be
    /// copied every time, so it starts at `last` (which rounds up to that power of 2) instead.
    static func startCapacity(after last: Int) -> Int {
        let wanted = min(last + last / 4, Self.maxStartCapacity)
        guard wanted > 1 else { return wanted }
        let rounded = 1 << (Int.bitWidth - (wanted - 1).leadingZeroBitCount)
        return rounded <= 2 * last ? wanted : min(last, Self.maxStartCapacity)
    }
}
