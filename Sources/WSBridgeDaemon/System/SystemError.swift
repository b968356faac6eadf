#if canImport(Glibc)
    import Glibc
#endif

/// A system call's failure: its errno, read as the C library words it ("No space left on device").
struct SystemError: Error, Equatable, CustomStringConvertible {
    var code: CInt

    /// The calling thread's errno, now.
    static var last: SystemError { SystemError(code: errno) }

    var description: String { String(cString: strerror(self.code)) }
}
