import NIOCore
import NIOSSL
import Testing

@testable import WSBridgeDaemon

/// TLS failures are told apart by NIOSSL's error cases, not by their text.
@Suite struct TLSFailureTests {
    @Test func handshakeFailuresAreClassifiedByTheirCase() {
        #expect(TLSFailure(NIOSSLExtraError.failedToValidateHostname) == .wrongName)
        #expect(TLSFailure(NIOSSLError.uncleanShutdown) == .notTLS(reason: "uncleanShutdown"))
        #expect(TLSFailure(NIOSSLError.handshakeFailed(.sslError([.eofDuringHandshake]))) == .notTLS(reason: "the connection closed during the handshake"))
        #expect(TLSFailure(NIOSSLError.noCertificateToValidate) == .other(reason: "noCertificateToValidate"))
    }

    @Test func otherErrorsAreNotTLSFailures() {
        #expect(TLSFailure(ChannelError.eof) == nil)
        #expect(TLSFailure(IOError(errnoCode: 111, reason: "connect")) == nil)
    }
}
