import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// Turns one request line into a `Request`, or the error reply that says what to fix.
enum RequestDecoding {
    /// nil for a blank line (ignored).
    static func decode(_ input: LocalLine, limits: RequestLimits) -> Result<Request, ProtocolError>? {
        Self.line(input).map { $0.flatMap { Self.request($0, limits: limits) } }
    }

    /// The line's bytes, checked to be UTF-8 (once: a plain send is read from them by SendLine,
    /// anything else by `request`), or what is wrong with it; nil for a blank line.
    static func line(_ input: LocalLine) -> Result<ByteBuffer, ProtocolError>? {
        switch input {
        case .tooLong(let limit):
            return .failure(
                ProtocolError(
                    .lineTooLong, "request line longer than local.max_line (\(limit) bytes): it was discarded up to its newline; send smaller requests")
            )
        case .line(let line):
            if line.readableBytes == 0 { return nil }
            // The link's own validator (eight ASCII bytes at a time), not the standard library's
            // generic one.
            var utf8 = UTF8Validator()
            let valid = line.withUnsafeReadableBytes { utf8.feed($0) } && utf8.isComplete
            guard valid else {
                return .failure(ProtocolError(.invalidUTF8, "the request line is not valid UTF-8: send UTF-8 encoded JSON"))
            }
            return .success(line)
        }
    }

    /// The request a UTF-8 line holds, or what is wrong with it.
    static func request(_ line: ByteBuffer, limits: RequestLimits) -> Result<Request, ProtocolError> {
        do {
            let json = try JSONValue.parse(line.readableBytesView)
            return .success(try Request.decode(json, limits: limits))
        } catch let error as JSONParseError {
            return .failure(ProtocolError(.invalidJSON, "\(error.description); each line must be one JSON object such as {\"id\":1,\"op\":\"status\"}"))
        } catch let error as ProtocolError {
            return .failure(error)
        } catch {
            return .failure(ProtocolError(.internalError, "\(error)"))
        }
    }
}
