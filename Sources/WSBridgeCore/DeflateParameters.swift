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

    /// What a server's extensions answer got wrong: every text is here.
    public enum NegotiationError: Error, Equatable, CustomStringConvertible {
        case notOffered(extension: String)
        case deflateNotOffered
        case answeredTwice
        case repeated(parameter: String)
        case windowBits(parameter: String, value: String)
        case unknownParameter(String)

        public var description: String {
            switch self {
            case .notOffered(let name): "server enabled extension '\(name)', which was not offered"
            case .deflateNotOffered: "server enabled permessage-deflate, which was not offered (upstream.compression = false)"
            case .answeredTwice: "server answered permessage-deflate twice"
            case .repeated(let key): "permessage-deflate parameter '\(key)' repeated"
            case .windowBits(let key, let value): "permessage-deflate \(key) must be 8...15, got '\(value)'"
            case .unknownParameter(let param): "unknown permessage-deflate parameter '\(param)'"
            }
        }
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
                throw .notOffered(extension: String(name))
            }
            guard offered else {
                throw .deflateNotOffered
            }
            guard result == nil else {
                throw .answeredTwice
            }
            var p = DeflateParameters()
            var seen: Set<String> = []
            for param in parts.dropFirst() {
                let kv = param.split(separator: "=", maxSplits: 1).map { $0.trimmingSpaces() }
                let key = kv[0].lowercased()
                let value = kv.count > 1 ? kv[1].trimmingQuotes() : nil
                guard seen.insert(key).inserted else {
                    throw .repeated(parameter: key)
                }
                func bits() throws(NegotiationError) -> Int {
                    guard let value, let b = Int(value), (8...15).contains(b) else {
                        throw .windowBits(parameter: key, value: value.map { String($0) } ?? "")
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
                    throw .unknownParameter(String(param))
                }
            }
            result = p
        }
        return result
    }
}
