/// The product's version, kept in this one place: the daemon's logs, User-Agent, `hello` and
/// `status`, and `wsbridged --version` / `wsbridgectl --version` all read it.
public enum WSBridgeVersion {
    public static let current = "0.1.0"
}
