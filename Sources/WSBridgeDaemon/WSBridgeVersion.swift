/// The daemon's version, reported in logs, the User-Agent and (later) the protocol's hello.
public enum WSBridgeVersion {
    public static let current = "0.1.0"
}
