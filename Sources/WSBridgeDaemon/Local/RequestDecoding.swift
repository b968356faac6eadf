import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// Turns one request line into a `Request`, or the error reply that says what to fix.
enum RequestDecoding {
    /// A plain `send` of text as apps write it (SendLine), read without building a request;
    /// nil for anything else (`decode` reads it).
    static func plainSend(_ input: LocalLine) -> SendLine? {
        guard case .line(let line) = input, line.readableBytes > 0 else { return nil }
        var utf8 = UTF8Validator()
        guard line.withUnsafeReadableBytes({ utf8.feed($0) }) && utf8.isComplete else { return nil }
        return SendLine.scan(line)
    }

    /// nil for a blank line (ignored).
    static func decode(_ input: LocalLine, limits: RequestLimits) -> Result<Request, ProtocolError>? {
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
}
