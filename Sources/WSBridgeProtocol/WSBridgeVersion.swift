/// The product's version, kept in this one place: the daemon's logs, User-Agent, `hello` and
/// `status`, `wsbridge_build_info`, `wsbridged --version` / `wsbridgectl --version`, the man pages
/// and the Debian package (scripts/package asks the binary) all read it; CHANGELOG.md's newest
/// entry must name it (a test checks). `commit` (the git commit of the build) is written by the
/// BuildCommit plugin.
public enum WSBridgeVersion {
    public static let current = "0.1.0"

    /// `0.1.0 (commit 7f101b41ee15)`, or `0.1.0` for a build outside a git checkout.
    public static var description: String {
        commit.map { "\(current) (commit \($0))" } ?? current
    }

    /// The upgrade request's User-Agent: `wsbridged/0.1.0 (7f101b41ee15)`.
    public static var userAgent: String {
        commit.map { "wsbridged/\(current) (\($0))" } ?? "wsbridged/\(current)"
    }
}
