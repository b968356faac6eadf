import NIOSSL

/// A failed TLS handshake, classified by NIOSSL's error cases and BoringSSL's reason codes
/// (not by searching an error's text), so each gets the error message that says what to fix.
enum TLSFailure: Equatable {
    /// The server's certificate chain is not trusted (CERTIFICATE_VERIFY_FAILED).
    case untrusted
    /// The certificate does not name the host.
    case wrongName
    /// The server refused the handshake (an alert: often a client certificate it wants).
    case refused(reason: String)
    /// The server does not speak TLS on this port (a plain port, or it hung up).
    case notTLS(reason: String)
    /// Any other TLS failure.
    case other(reason: String)

    /// nil when `error` is not a TLS error.
    init?(_ error: any Error) {
        switch error {
        case let e as NIOSSLExtraError where e == .failedToValidateHostname:
            self = .wrongName
        case NIOSSLError.uncleanShutdown:
            self = .notTLS(reason: "uncleanShutdown")
        case NIOSSLError.handshakeFailed(.sslError(let stack)):
            if stack.contains(.eofDuringHandshake) {
                self = .notTLS(reason: "the connection closed during the handshake")
                return
            }
            let reasons = stack.map(Self.reason)
            let first = reasons.first ?? "\(error)"
            if reasons.contains("CERTIFICATE_VERIFY_FAILED") {
                self = .untrusted
            } else if let r = reasons.first(where: { $0 == "TLSV13_ALERT_CERTIFICATE_REQUIRED" || $0 == "SSLV3_ALERT_HANDSHAKE_FAILURE" }) {
                self = .refused(reason: r)
            } else if reasons.contains("WRONG_VERSION_NUMBER") {
                self = .notTLS(reason: "WRONG_VERSION_NUMBER")
            } else {
                self = .other(reason: first)
            }
        case let e as NIOSSLError:
            self = .other(reason: "\(e)")
        default:
            return nil
        }
    }

    /// BoringSSL's reason name from one of its errors: the fifth field of
    /// `error:CODE:LIBRARY:FUNCTION:REASON` (ERR_error_string_n's documented format), which
    /// NIOSSL gives as `Error: NUMBER error:...:REASON at FILE:LINE`.
    static func reason(_ error: BoringSSLInternalError) -> String {
        let text = "\(error)"
        guard let start = text.indices.first(where: { text[$0...].hasPrefix("error:") }) else { return text }
        let fields = text[start...].split(separator: ":", maxSplits: 4, omittingEmptySubsequences: false)
        guard fields.count == 5 else { return text }
        return String(fields[4].prefix { $0 != " " })
    }
}
