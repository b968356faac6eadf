/// permessage-deflate (RFC 7692) as negotiated with the server.
public struct DeflateParameters: Sendable, Equatable {
    /// The server resets its compression context after each message.
    public var serverNoContextTakeover = false
    /// We must reset our compression context after each message.
    public var clientNoContextTakeover = false
    /// The server's LZ77 window (we inflate with 15, which reads any smaller window).
    public var serverMaxWindowBits = 15
    /// Our LZ77 window limit.
    public var clientMaxWindowBits = 15

    public init() {}

    /// What a client offers: deflate, and that the server may limit our window.
    public static let offer = "permessage-deflate; client_max_window_bits"

    public struct NegotiationError: Error, Equatable, CustomStringConvertible {
        public var description: String
    }

    /// Reads the server's `Sec-WebSocket-Extensions` answer. nil: compression is off for this link.
    /// Throws when the server enabled something that was not offered or answered with bad parameters.
    public static func negotiate(response: String?, offered: Bool) throws(NegotiationError) -> DeflateParameters? {
        guard let response, !response.allSatisfy({ $0 == " " || $0 == "\t" }) else { return nil }
        var result: DeflateParameters?
        for item in response.split(separator: ",") {
            let parts = item.split(separator: ";").map { $0.trimmingSpaces() }
            guard let name = parts.first, !name.isEmpty else { continue }
            guard name.lowercased() == "permessage-deflate" else {
                throw NegotiationError(description: "server enabled extension '\(name)', which was not offered")
            }
            guard offered else {
                throw NegotiationError(description: "server enabled permessage-deflate, which was not offered (upstream.compression = false)")
            }
            guard result == nil else {
                throw NegotiationError(description: "server answered permessage-deflate twice")
            }
            var p = DeflateParameters()
            var seen: Set<String> = []
            for param in parts.dropFirst() {
                let kv = param.split(separator: "=", maxSplits: 1).map { $0.trimmingSpaces() }
                let key = kv[0].lowercased()
                let value = kv.count > 1 ? kv[1].trimmingQuotes() : nil
                guard seen.insert(key).inserted else {
                    throw NegotiationError(description: "permessage-deflate parameter '\(key)' repeated")
                }
                func bits() throws(NegotiationError) -> Int {
                    guard let value, let b = Int(value), (8...15).contains(b) else {
                        throw NegotiationError(description: "permessage-deflate \(key) must be 8...15, got '\(value ?? "")'")
                    }
                    return b
                }
                switch key {
                case "server_no_context_takeover" where value == nil:
                    p.serverNoContextTakeover = true
                case "client_no_context_takeover" where value == nil:
                    p.clientNoContextTakeover = true
                case "server_max_window_bits":
                    p.serverMaxWindowBits = try bits()
                case "client_max_window_bits":
                    p.clientMaxWindowBits = try bits()
                default:
                    throw NegotiationError(description: "unknown permessage-deflate parameter '\(param)'")
                }
            }
            result = p
        }
        return result
    }
}
