public enum WSBridgeProtocolVersion { public static let current = 1 }
