import NIOCore
import WSBridgeCore

/// A local client's socket send buffer (issue 46): `local.lagging_send_buffer_bytes` from its
/// accept until it reads fast, then `local.send_buffer_bytes`; the small one again when it lags
/// and does not read fast now. A slow reader then has few lines waiting in the kernel, where they
/// cannot be dropped for fresher ones; a fast one keeps the large buffer that keeps it reading
/// while the daemon's loop is busy. Its methods say what the socket's buffer must become (nil: as
/// it is); `LocalClient` sets it.
struct ClientSendBuffer {
    /// `local.send_buffer_bytes` (0: the system's default) and `local.lagging_send_buffer_bytes`.
    private var large: Int
    private var small: Int
    /// What the socket has now (0: the system's default).
    private(set) var current: Int
    /// Bytes written to the client since `windowStart` (`wrote`).
    private var windowBytes = 0
    private var windowStart: NIODeadline
    /// A window's length: a client reads fast if it read enough within one.
    static let window = TimeAmount.milliseconds(500)

    init(_ limits: Configuration.Local, now: NIODeadline = .now()) {
        self.windowStart = now
        self.large = limits.sendBufferBytes
        self.small = limits.laggingSendBufferBytes
        self.current = Self.initial(limits)
    }

    /// The buffer a client's socket has from its accept: the small one until it reads fast, when
    /// there is one.
    static func initial(_ limits: Configuration.Local) -> Int {
        Self.adapts(large: limits.sendBufferBytes, small: limits.laggingSendBufferBytes) ? limits.laggingSendBufferBytes : limits.sendBufferBytes
    }

    private static func adapts(large: Int, small: Int) -> Bool { small > 0 && small < large }

    /// Counts `bytes` written to the client, in windows of half a second at most: a client that
    /// read half the large buffer (at least four small ones) within one reads fast (a reader the
    /// feed or a burst keeps busy, not a slow one) and gets the large buffer, whose lines it will
    /// read soon. What it read is what was written in the window less what may still wait in
    /// NIO's buffer (`buffered`, asked only once the window's writes could be enough) and the
    /// kernel's: a client that reads nothing is never fast. On the small buffer a clock read per
    /// write (a batch of lines); on the large one per `send_buffer_bytes` written (`lagged` reads
    /// the window's age).
    mutating func wrote(_ bytes: Int, now: NIODeadline = .now(), buffered: () -> Int) -> Int? {
        guard Self.adapts(large: self.large, small: self.small) else { return nil }
        if self.current == self.large {
            if self.windowBytes == 0 { self.windowStart = now }
            self.windowBytes += bytes
            if self.windowBytes >= self.large { self.windowBytes = 0 }
            return nil
        }
        if now - self.windowStart > Self.window {
            self.windowStart = now
            self.windowBytes = 0
        }
        self.windowBytes += bytes
        // Half the large buffer: more than a reader's own buffers pull in at once (an asyncio
        // reader takes up to 256 KiB in a read), less than a flat-out run's first second.
        let threshold = max(4 * self.small, self.large / 2)
        // The kernel takes writes while what it holds is under the buffer (Linux doubles the
        // setting), so the last one may take it half over.
        let inKernel = 3 * self.current
        guard self.windowBytes >= threshold + inKernel, self.windowBytes - buffered() - inKernel >= threshold else { return nil }
        self.windowBytes = 0
        self.windowStart = now
        return self.set(self.large)
    }

    /// The client lags (it dropped messages after half a second behind): the small buffer, unless
    /// it reads fast now (on the large one, `send_buffer_bytes` written within the last window).
    /// Catching up does not make it large again; reading fast does (`wrote`).
    mutating func lagged(now: NIODeadline = .now()) -> Int? {
        guard Self.adapts(large: self.large, small: self.small), now - self.windowStart > Self.window else { return nil }
        return self.set(self.small)
    }

    /// A reload's `local.lagging_send_buffer_bytes` (`send_buffer_bytes` takes a restart: the
    /// sockets have it from their accept): with no small buffer any more, a client on it gets the
    /// large one now.
    mutating func update(small: Int) -> Int? {
        self.small = small
        guard !Self.adapts(large: self.large, small: small), self.large > 0 else { return nil }
        return self.set(self.large)
    }

    private mutating func set(_ bytes: Int) -> Int? {
        guard bytes != self.current else { return nil }
        self.current = bytes
        return bytes
    }
}
